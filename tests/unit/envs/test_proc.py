"""Services forge starts are found again by their pid file, and only they are ever signalled."""

from __future__ import annotations

import json
import os
import sys

from openforgerl.envs import _proc


def test_started_service_is_found_stopped_and_forgotten():
    pid = _proc.start_detached(["sleep", "300"], "sleeper")
    try:
        assert _proc.read_pid("sleeper") == pid
        assert _proc.pid_file("sleeper").read_text().strip() == str(pid)  # `kill $(cat …)` works
        assert os.getsid(pid) == pid  # its own session: it outlives the forge command
    finally:
        assert _proc.stop("sleeper") == pid
    assert not _proc.is_alive(pid)
    assert not _proc.pid_file("sleeper").exists()
    assert _proc.read_pid("sleeper") is None
    assert _proc.stop("sleeper") is None


def test_output_goes_to_the_log_and_env_is_passed():
    pid = _proc.start_detached([sys.executable, "-c", "import os; print('hello', os.environ['GREETING'])"],
                               "talker", env={"GREETING": "world"})
    os.waitpid(pid, 0)
    assert "hello world" in _proc.log_file("talker").read_text()
    assert _proc.read_pid("talker") is None  # it exited


def test_a_recycled_pid_is_never_signalled():
    # A pid file naming a live process that is not what we started (here: this test process).
    _proc.pid_file("sleeper").parent.mkdir(parents=True, exist_ok=True)
    _proc.pid_file("sleeper").write_text(f"{os.getpid()}\n")
    _proc.state_dir().joinpath("sleeper.cmd").write_text(json.dumps(["sleep", "300"]))
    assert _proc.read_pid("sleeper") is None
    assert _proc.stop("sleeper") is None  # and we are still alive to assert it


def test_a_script_started_by_name_is_still_recognised(tmp_path):
    script = tmp_path / "my-server"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(300)\n")
    script.chmod(0o755)
    pid = _proc.start_detached([str(script), "--port", "1"], "scripted")
    try:
        assert _proc.read_pid("scripted") == pid
    finally:
        assert _proc.stop("scripted") == pid
