"""How the Docker runtime reads the way a sandbox or its harness ended.

Who ended a stopped container: Docker logs its ``kill`` event after the signal is sent, so a container it SIGKILLed
can read as exited a moment before that event exists. Read too early, an outside kill (an infra error, discarded)
looked like the agent ending its own sandbox (a policy failure with reward 0, kept for training)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from openforgerl.rollout.runtimes.docker import DockerSandbox


class EventLog:
    """Docker's events endpoint as the daemon serves it: the events logged between ``since`` and ``until``, each
    delivered when it is logged, the stream held open until ``until`` when that is in the future."""

    def __init__(self, logged: list[tuple[float, str]]) -> None:
        self.logged = logged  # (when it is logged, action)
        self.closed = 0

    def events_stream(self, since: float, until: float, decode: bool, filters: dict):
        for logged_at, action in sorted(self.logged):
            if logged_at > until:
                break
            time.sleep(max(0.0, logged_at - time.time()))
            if logged_at >= since and action in filters["event"]:
                yield {"Action": action, "id": filters["container"]}
        time.sleep(max(0.0, until - time.time()))

    def events(self, **kw):
        log = self

        class Stream:
            def __init__(self) -> None:
                self.inner = log.events_stream(**kw)

            def __iter__(self):
                return self.inner

            def close(self) -> None:
                log.closed += 1
        return Stream()


def stopped(log: EventLog, since: float) -> SimpleNamespace:
    return SimpleNamespace(_api=log, container=SimpleNamespace(id="c0ffee"), _since=since)


def test_a_kill_docker_logs_just_after_the_exit_is_still_an_outside_kill():
    now = time.time()
    log = EventLog([(now + 0.3, "kill")])  # the container already reads as exited; its kill event comes next
    started = time.monotonic()
    assert DockerSandbox._ended_from_inside(stopped(log, now - 5), settle_s=10.0) is False
    assert time.monotonic() - started < 8.0  # answered at the event (0.3 s), not at the end of the window
    assert log.closed == 1


def test_a_stop_with_no_kill_stop_or_oom_event_is_from_inside_and_an_old_kill_does_not_count():
    now = time.time()
    log = EventLog([(now - 10, "kill"), (now - 9, "start")])  # our own restart's kill, before _since
    started = time.monotonic()
    assert DockerSandbox._ended_from_inside(stopped(log, now - 5), settle_s=0.4) is True
    assert time.monotonic() - started >= 0.35  # waited out the window for a late event


def test_an_events_api_that_fails_reads_as_an_outside_kill():
    def broken(**kw):
        raise ConnectionError("daemon gone")
    assert DockerSandbox._ended_from_inside(stopped(SimpleNamespace(events=broken), 0), settle_s=0.1) is False


def test_a_harness_killed_by_a_signal_reads_137_even_when_what_it_left_behind_prints_after_setsid():
    from openforgerl.rollout.runtimes.docker import _signal_status
    left_behind = "setsid: child 31 did not exit normally: No such file or directory\nbash: line 1: 35 Killed  hog\n"
    assert _signal_status(9, left_behind) == (137, "bash: line 1: 35 Killed  hog\n")
    assert _signal_status(9, "out of luck\nsetsid: child 7 did not exit normally\n") == (137, "out of luck\n")
    assert _signal_status(9, "an exit code of 9, no signal\n") == (9, "an exit code of 9, no signal\n")
    assert _signal_status(0x8B, "setsid: child 2 did not exit normally\n") == (139, "")  # SIGSEGV, core dumped
