"""Services forge starts are found again by their record, and only they are ever signalled."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass

import pytest

from openforgerl.processes import is_alive
from openforgerl.stack.services import Service, ServiceRecord, port_in_use


@dataclass(frozen=True, kw_only=True)
class WebRecord(ServiceRecord):
    url: str


def service(name: str) -> Service[ServiceRecord]:
    return Service(name, ServiceRecord)


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_started_service_is_found_stopped_and_forgotten():
    sleeper = service("sleeper")
    pid = sleeper.start(["sleep", "300"]).pid
    try:
        assert sleeper.running().pid == pid
        assert sleeper.pid_file.read_text().strip() == str(pid)  # `kill $(cat …)` works
        assert os.getsid(pid) == pid  # its own session: it outlives the forge command
    finally:
        assert sleeper.stop().pid == pid
    assert not is_alive(pid)
    assert not sleeper.pid_file.exists() and not sleeper.record_file.exists()
    assert sleeper.running() is None
    assert sleeper.stop() is None


def test_a_service_is_recognised_the_moment_start_returns():
    # exec() shows the new argv only a moment after Popen returns; start waits for it.
    sleeper = service("sleeper")
    for _ in range(10):
        pid = sleeper.start(["sleep", "300"]).pid
        assert sleeper.stop().pid == pid


def test_output_goes_to_the_log_and_env_is_passed():
    talker = service("talker")
    pid = talker.start([sys.executable, "-c", "import os; print('hello', os.environ['GREETING'])"],
                       env={"GREETING": "world"}).pid
    os.waitpid(pid, 0)
    assert "hello world" in talker.log_file.read_text()
    assert talker.running() is None  # it exited


@pytest.mark.parametrize("layout", ["record", "pid and cmd files of older forge versions"])
def test_a_recycled_pid_is_never_signalled(layout):
    # A record naming a live process that is not what we started (here: this test process).
    sleeper = service("sleeper")
    sleeper.pid_file.parent.mkdir(parents=True, exist_ok=True)
    sleeper.pid_file.write_text(f"{os.getpid()}\n")
    if layout == "record":
        sleeper.record_file.write_text(json.dumps({"pid": os.getpid(), "command": ["sleep", "300"], "log": "x"}))
    else:
        sleeper.pid_file.with_suffix(".cmd").write_text(json.dumps(["sleep", "300"]))
    assert sleeper.running() is None
    assert sleeper.stop() is None  # and we are still alive to assert it


def test_a_service_started_by_older_forge_is_still_found_and_stopped():
    sleeper = service("sleeper")
    pid = sleeper.start(["sleep", "300"]).pid
    sleeper.record_file.unlink()  # what older versions left: NAME.pid and NAME.cmd
    sleeper.pid_file.with_suffix(".cmd").write_text(json.dumps(["sleep", "300"]))
    assert sleeper.running().pid == pid
    assert sleeper.stop().pid == pid
    assert not sleeper.pid_file.with_suffix(".cmd").exists()


def test_a_script_started_by_name_is_still_recognised(tmp_path):
    script = tmp_path / "my-server"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(300)\n")
    script.chmod(0o755)
    scripted = service("scripted")
    pid = scripted.start([str(script), "--port", "1"]).pid
    try:
        assert scripted.running().pid == pid
    finally:
        assert scripted.stop().pid == pid


def test_the_record_keeps_what_the_service_adds():
    web = Service("web", WebRecord)
    record = web.start(["sleep", "300"], url="http://127.0.0.1:1/v1")
    try:
        assert web.running() == record
        assert json.loads(web.record_file.read_text())["url"] == "http://127.0.0.1:1/v1"
    finally:
        web.stop()


def test_stop_takes_the_whole_process_group_even_a_child_that_ignores_term(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    child = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"open({str(child_pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)")
    leader = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(300)"
    group = service("group")
    group.start([sys.executable, "-c", leader])
    assert wait_until(lambda: child_pid_file.exists() and child_pid_file.read_text())
    child_pid = int(child_pid_file.read_text())
    group.stop(grace_s=5)
    assert wait_until(lambda: not is_alive(child_pid))


def test_wait_ready_tells_an_exit_and_the_log_tail_shows_only_the_latest_run():
    failing = service("failing")
    first = failing.start([sys.executable, "-c", "print('first run')"])
    assert failing.wait_ready(first, lambda: False, timeout_s=10, poll_s=0.05) == "exited"
    second = failing.start([sys.executable, "-c", "print('second run'); print('bad config')"])
    assert failing.wait_ready(second, lambda: False, timeout_s=10, poll_s=0.05) == "exited"
    tail = failing.log_tail()
    assert "second run | bad config" in tail and "first run" not in tail
    assert failing.log_tail(2, block=True) == "    second run\n    bad config"


def test_wait_ready_returns_when_ready_and_times_out_otherwise():
    sleeper = service("sleeper")
    record = sleeper.start(["sleep", "300"])
    try:
        assert sleeper.wait_ready(record, lambda: True, timeout_s=5) == "ready"
        assert sleeper.wait_ready(record, lambda: False, timeout_s=0.3, poll_s=0.05) == "timed out"
    finally:
        sleeper.stop()


def test_log_tail_without_a_log():
    assert service("never").log_tail() == "(no log)"
    assert service("never").log_tail(block=True) == "    (no log)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_port_in_use_sees_a_bound_socket(silent_listener):
    assert port_in_use("127.0.0.1", silent_listener)


def test_port_in_use_is_false_once_the_socket_is_closed():
    assert not port_in_use("127.0.0.1", free_port())


def test_await_ready_raises_the_given_error_with_the_log_tail():
    from openforgerl.errors import StackError

    failing = service("failing")
    record = failing.start([sys.executable, "-c", "print('port 5000 taken'); raise SystemExit(3)"])
    with pytest.raises(StackError, match="thing exited while starting: .*port 5000 taken") as raised:
        failing.await_ready(record, lambda: False, 10, StackError, what="thing", poll_s=0.05)
    assert raised.value.fix == f"read {record.log}"
    sleeper = service("sleeper")
    record = sleeper.start([sys.executable, "-c", "import time; print('still booting'); time.sleep(30)"])
    try:
        with pytest.raises(StackError, match=r"was not ready within 0 s: .*still booting"):
            sleeper.await_ready(record, lambda: False, 0.3, StackError, what="sleeper", poll_s=0.05)
    finally:
        sleeper.stop(grace_s=1)
