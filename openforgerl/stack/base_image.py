"""The base image ``openforgerl/base:bookworm``, made locally: debootstrap a rootfs, ``docker import`` it.

No registry can be pulled from, so every task image starts from this one. Invariant: the image
carries the key of the recipe it was built from (label ``org.openforgerl.base-key``), and the rootfs
tarball is cached under ``forge_home()/cache/base-image/`` by that same key, so a rerun (or a
``docker rmi``) re-imports in seconds, while changing the recipe (include list, suite, setup steps)
rebuilds both. The Debian mirror is read from this machine's apt sources at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from docker.errors import DockerException, ImageNotFound

from openforgerl.containers.client import docker_client
from openforgerl.errors import EnvBuildError, ResourceError, StackError, UserError
from openforgerl.paths import forge_home, state_dir
from openforgerl.stack.apt import apt_install, is_root
from openforgerl.stack.part import Action, Part, PartStatus, Reporter
from openforgerl.stack.services import exclusive

IMAGE = "openforgerl/base:bookworm"
SUITE = "bookworm"
VARIANT = "minbase"
# What task, harness and verifier layers rely on: python3 (+venv) for verifiers and pip-installed
# harnesses, curl/ca-certificates for HTTP checks and installers, git for code tasks, jq for JSON
# verifiers, procps for ps/kill in solutions, xz-utils to unpack Node tarballs.
INCLUDE = ("ca-certificates", "curl", "git", "jq", "procps", "python3", "python3-venv", "xz-utils")
# The unprivileged user agents run as (some harnesses refuse to run as root).
AGENT_USER, AGENT_UID = "agent", 1000
# Bump when the steps after debootstrap or IMPORT_CHANGES change, so the cache and image are rebuilt.
RECIPE_VERSION = 1
KEY_LABEL = "org.openforgerl.base-key"
MIRROR_ENV = "OPENFORGERL_DEBIAN_MIRROR"
MIRROR_FIX = (f"pass a Debian mirror: forge stack up --mirror URL, or set {MIRROR_ENV}=URL "
              "(the URL of a Debian archive that serves bookworm)")
IMPORT_CHANGES = (
    'CMD ["/bin/bash"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
)


# ---- the Debian mirror, from this machine's apt sources -------------------------------------

def _deb822_entries(text: str) -> list[tuple[str, list[str]]]:
    """(uri, suites) for every enabled ``Types: deb`` stanza of a deb822 ``.sources`` file."""
    entries: list[tuple[str, list[str]]] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:  # a folded continuation line
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        suites = fields.get("suites", "").split()
        entries.extend((uri, suites) for uri in fields.get("uris", "").split())
    return entries


def _one_line_entries(text: str) -> list[tuple[str, list[str]]]:
    """(uri, [suite]) for every ``deb [options] URI SUITE COMPONENTS`` line of a sources.list."""
    entries: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()  # drop [options], comments
        if len(words) >= 3 and words[0] == "deb":
            entries.append((words[1], [words[2]]))
    return entries


def apt_source_entries(apt_dir: Path = Path("/etc/apt")) -> list[tuple[str, list[str]]]:
    entries: list[tuple[str, list[str]]] = []
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        entries += _deb822_entries(path.read_text(encoding="utf-8", errors="replace"))
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            entries += _one_line_entries(path.read_text(encoding="utf-8", errors="replace"))
    return entries


def find_mirror(suite: str = SUITE, apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive to debootstrap from: $OPENFORGERL_DEBIAN_MIRROR, else the apt source
    that serves ``suite`` itself, else the first main-archive source (not -security/-updates/...)."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    entries = [(uri, suites) for uri, suites in apt_source_entries(apt_dir)
               if uri.startswith(("http://", "https://", "file:/"))]
    for uri, suites in entries:
        if suite in suites:
            return uri
    for uri, suites in entries:
        if any("-" not in s and "/" not in s for s in suites):
            return uri
    raise UserError(f"no Debian mirror found in {apt_dir}/sources.list or {apt_dir}/sources.list.d/",
                    fix=MIRROR_FIX)


# ---- the recipe key and the rootfs cache ----------------------------------------------------

def recipe_key(include: tuple[str, ...] = INCLUDE, suite: str = SUITE, arch: str | None = None) -> str:
    """Content key of what the image holds; the mirror is not part of it (any mirror serves the same suite)."""
    recipe = {"suite": suite, "variant": VARIANT, "include": sorted(set(include)),
              "arch": arch or _dpkg_arch(), "user": [AGENT_USER, AGENT_UID], "recipe": RECIPE_VERSION}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    return forge_home() / "cache" / "base-image"


def cached_rootfs(key: str, suite: str = SUITE) -> Path:
    return cache_dir() / f"{suite}-{key}.tar"


def _dpkg_arch() -> str:
    try:
        return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.uname().machine


# ---- building -------------------------------------------------------------------------------

def _raise_if_no_space(output: str, doing: str) -> None:
    if "no space left on device" in output.lower():
        raise ResourceError(f"no space left on device while {doing}",
                            fix=f"free disk space (df -h {forge_home()}) or point OPENFORGERL_HOME at a "
                                "larger disk, then rerun forge stack up")


def _run(cmd: list[str], doing: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        _raise_if_no_space(out.stdout + out.stderr, doing)
        tail = " | ".join((out.stderr.strip() or out.stdout.strip()).splitlines()[-5:])
        raise EnvBuildError(f"{doing} failed (exit {out.returncode}): {tail}",
                            fix="check the mirror and the network, then rerun forge stack up")


def _unmount_below(root: Path) -> None:
    """debootstrap mounts /proc and /sys in the target; never delete a tree that still has them."""
    mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    below = [m.split()[1] for m in mounts if m.split()[1].startswith(str(root) + "/")]
    for target in sorted(below, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False)


def _finish_rootfs(rootfs: Path) -> None:
    """Steps after debootstrap: the agent user, no host identity, no package caches."""
    _run(["chroot", str(rootfs), "useradd", "--create-home", "--user-group", "--uid", str(AGENT_UID),
          "--shell", "/bin/bash", AGENT_USER], "adding the agent user")
    # debootstrap copies the host's resolv.conf and hostname; Docker provides both per container.
    for name in ("etc/resolv.conf", "etc/hostname"):
        (rootfs / name).unlink(missing_ok=True)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()


def _debootstrap(rootfs: Path, mirror: str, include: tuple[str, ...], suite: str) -> None:
    try:
        _run(["debootstrap", f"--variant={VARIANT}", f"--include={','.join(include)}", suite,
              str(rootfs), mirror], f"debootstrap {suite} from {mirror}")
    except EnvBuildError as exc:
        # The real reason is in the target's log, which is deleted with the scratch dir: keep a copy.
        log = rootfs / "debootstrap" / "debootstrap.log"
        kept = state_dir() / "debootstrap.log"
        read = ""
        if log.is_file():
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, kept)
            read = f"read {kept}; "
        raise EnvBuildError(exc.what, fix=f"{read}if the mirror is wrong, {MIRROR_FIX}") from exc


def build_rootfs_tarball(target: Path, mirror: str, include: tuple[str, ...] = INCLUDE,
                         suite: str = SUITE) -> None:
    """debootstrap into a scratch dir next to ``target`` and tar it there (atomically renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="rootfs-", dir=target.parent))
    rootfs, partial = scratch / "rootfs", scratch / "rootfs.tar"
    try:
        _debootstrap(rootfs, mirror, include, suite)
        _unmount_below(rootfs)
        _finish_rootfs(rootfs)
        _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], "packing the rootfs")
        os.replace(partial, target)
    finally:
        _unmount_below(rootfs)
        shutil.rmtree(scratch, ignore_errors=True)


def _prune_other_tarballs(keep: Path) -> None:
    for old in cache_dir().glob(f"{SUITE}-*.tar"):
        if old != keep:
            old.unlink(missing_ok=True)


class BaseImagePart(Part):
    """``openforgerl/base:bookworm``: Debian minbase + INCLUDE + the ``agent`` user."""

    name = "base-image"

    def __init__(self, mirror: str | None = None, include: tuple[str, ...] = INCLUDE) -> None:
        self.mirror = mirror
        self.include = include
        self.key = recipe_key(include)

    def _image_key(self) -> str | None:
        """The recipe key of the existing image ("" if unlabelled), None if there is no image."""
        try:
            image = docker_client().images.get(IMAGE)
        except ImageNotFound:
            return None
        return (image.labels or {}).get(KEY_LABEL, "")

    def check(self) -> PartStatus:
        try:
            found = self._image_key()
        except StackError as exc:
            return self.status(False, f"cannot look for {IMAGE}: {exc.what}", fix=exc.fix)
        if found is None:
            cached = " (rootfs cached: import takes seconds)" if cached_rootfs(self.key).is_file() else ""
            return self.status(False, f"{IMAGE} missing{cached}", fix="forge stack up")
        if found != self.key:
            return self.status(False, f"{IMAGE} was built from another recipe ({found or 'unlabelled'}, "
                                      f"want {self.key})", fix="forge stack up rebuilds it")
        return self.status(True, f"{IMAGE} (recipe {self.key}, user {AGENT_USER} uid {AGENT_UID})")

    def ensure(self, report: Reporter) -> PartStatus:
        with exclusive(self.name):  # one debootstrap at a time, the others then find the image
            status = self.check()
            if status.ready:
                return status
            docker_client()  # an engine problem is reported as such, not as a build failure
            tarball = cached_rootfs(self.key)
            if not tarball.is_file():
                self._build(tarball, report)
            self._import(tarball, report)
            return self.check()

    def _build(self, tarball: Path, report: Reporter) -> None:
        mirror = self.mirror or find_mirror()
        if not is_root():
            raise StackError(f"building {IMAGE} runs debootstrap, which needs root",
                             fix="rerun forge stack up as root (sudo forge stack up)")
        if shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            apt_install(["debootstrap", "debian-archive-keyring"])
            report(Action("installed Debian packages debootstrap, debian-archive-keyring",
                          "apt-get remove -y debootstrap"))
        began = time.monotonic()
        build_rootfs_tarball(tarball, mirror, self.include)
        _prune_other_tarballs(tarball)
        size_mb = tarball.stat().st_size / 1e6
        report(Action(f"built a {SUITE} rootfs with debootstrap from {mirror} in "
                      f"{time.monotonic() - began:.0f} s, cached as {tarball} ({size_mb:.0f} MB)",
                      f"rm {tarball}"))

    def _import(self, tarball: Path, report: Reporter) -> None:
        began = time.monotonic()
        repository, _, tag = IMAGE.partition(":")
        changes = [*IMPORT_CHANGES, f"LABEL {KEY_LABEL}={self.key}"]
        try:
            docker_client(timeout=600).api.import_image_from_file(str(tarball), repository, tag, changes)
        except DockerException as exc:
            _raise_if_no_space(str(exc), f"importing {IMAGE}")
            raise EnvBuildError(f"docker import of {tarball} failed: {exc}",
                                fix=f"delete {tarball} and rerun forge stack up") from exc
        report(Action(f"imported {IMAGE} from {tarball.name} in {time.monotonic() - began:.0f} s",
                      f"docker rmi {IMAGE}"))
