"""The real ``forge proxy`` process: kill -9 mid-rollout loses nothing; a client that hangs up is recorded.

The proxy runs as its own process on a free loopback port with the scripted engine (slow enough
that we can act mid-answer) and the policy's real tokenizer.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from openforgerl.testing.proxy import policy_template

ADMIN = "integration-admin-token"
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]
LONG = "This answer is long on purpose so that it streams for a while. " * 6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    policy_template().tokenizer.save_pretrained(str(directory))
    return directory


class ProxyProcess:
    def __init__(self, tmp: Path, tokenizer_dir: Path) -> None:
        self.data_dir, self.port = tmp / "data", free_port()
        self.script = tmp / "script.yaml"
        self.script.write_text(yaml.safe_dump({"token_delay_s": 0.05, "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hi"}}]},
            {"text": LONG}]}))
        self.tokenizer_dir = tokenizer_dir
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.extra: list[str] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--script", str(self.script),
             "--port", str(self.port), "--admin-token", ADMIN, "--data-dir", str(self.data_dir),
             "--tokenizer", str(self.tokenizer_dir), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError("forge proxy did not become healthy in 90 s")

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def admin(self, method: str, path: str, **kw) -> httpx.Response:
        return httpx.request(method, self.url + path, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10, **kw)


@pytest.fixture
def proxy(tmp_path, tokenizer_dir):
    process = ProxyProcess(tmp_path, tokenizer_dir)
    process.start()
    yield process
    process.stop()


def chat(proxy: ProxyProcess, token: str, messages: list, **extra) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "smollm2", "messages": messages, "tools": TOOLS, **extra}, timeout=30)


def exported(proxy: ProxyProcess, name: str) -> list[dict]:
    """The rows of `forge proxy --export` of the proxy's data dir (run as its own process)."""
    import pyarrow.parquet as pq

    path = proxy.data_dir.parent / name
    done = subprocess.run([sys.executable, "-m", "openforgerl", "proxy", "--export", str(path),
                           "--data-dir", str(proxy.data_dir), "--tokenizer", str(proxy.tokenizer_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return pq.read_table(path).to_pylist()


def test_kill_9_mid_rollout_loses_nothing_and_the_rollout_continues(proxy):
    created = proxy.admin("POST", "/rollouts", json={"metadata": {"task": "hello"}}).json()
    messages = [{"role": "user", "content": "create hello.txt containing hi"}]
    first = chat(proxy, created["token"], messages).json()["choices"][0]["message"]
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "ok"}]
    before = proxy.admin("GET", f"/rollouts/{created['id']}/trajectory").json()

    with httpx.stream("POST", proxy.url + "/v1/chat/completions", headers={"authorization": f"Bearer {created['token']}"},
                      json={"messages": messages, "tools": TOOLS, "stream": True}, timeout=30) as resp:
        lines = resp.iter_lines()
        assert [next(lines) for _ in range(6)]  # the answer is streaming ...
        proxy.kill9()  # ... and the proxy dies under it

    proxy.start()  # same data dir, new process
    recovered = proxy.admin("GET", f"/rollouts/{created['id']}/trajectory").json()
    assert recovered["segments"] == before["segments"]
    assert [c["status"] for c in recovered["calls"]] == ["ok", "interrupted"]
    assert recovered["metadata"] == {"task": "hello"}

    # the harness retries with the same token; the retry extends the recorded segment
    retry = chat(proxy, created["token"], messages)
    assert retry.status_code == 200  # (a fresh scripted engine starts its script over)
    finished = proxy.admin("POST", f"/rollouts/{created['id']}/finish", json={"reward": 1.0}).json()
    assert finished["counts"]["clean"] == 2 and finished["segments"] == 1
    assert chat(proxy, created["token"], messages).status_code == 401

    proxy.kill9()
    proxy.start()
    final = proxy.admin("GET", f"/rollouts/{created['id']}/trajectory").json()
    assert final["reward"] == 1.0 and final["status"] == "completed" and len(final["segments"]) == 1
    log = (proxy.data_dir / "rollouts" / f"{created['id']}.log").read_bytes()
    assert created["token"].encode() not in log  # only the token's hash is stored
    assert b"create hello.txt" not in log  # token ids, not request text (sizes: bench/results/proxy.md)

    (row,) = exported(proxy, "rollouts.parquet")
    assert row["reward"] == 1.0 and row["prompt_ids"] == final["segments"][0]["prompt_ids"]
    assert json.loads(row["metadata"]) == {"task": "hello"}


def test_an_export_after_a_machine_crash_holds_what_only_the_journal_kept(proxy):
    """Events reach the logs unsynced and the journal synced: after kill -9 and a lost page cache (the log
    cut back to its open event), `forge proxy --export` run before any proxy restarts still has the call
    and the reward, and writes nothing into the data dir."""
    created = proxy.admin("POST", "/rollouts", json={"metadata": {"task": "crash"}}).json()
    assert chat(proxy, created["token"], [{"role": "user", "content": "create hello.txt"}]).status_code == 200
    proxy.admin("POST", f"/rollouts/{created['id']}/finish", json={"reward": 1.0})
    final = proxy.admin("GET", f"/rollouts/{created['id']}/trajectory").json()
    proxy.kill9()
    log = proxy.data_dir / "rollouts" / f"{created['id']}.log"
    data = log.read_bytes()
    log.write_bytes(data[:data.index(b"\n") + 1])  # what a machine crash can leave of an unsynced log
    before = {path: path.read_bytes() for path in (proxy.data_dir / "rollouts").iterdir()}

    (row,) = exported(proxy, "crashed.parquet")
    assert row["reward"] == 1.0 and row["prompt_ids"] == final["segments"][0]["prompt_ids"]
    assert json.loads(row["metadata"]) == {"task": "crash"}
    assert {path: path.read_bytes() for path in (proxy.data_dir / "rollouts").iterdir()} == before


def test_a_client_that_hangs_up_mid_stream_is_recorded_and_its_generation_stops(proxy):
    created = proxy.admin("POST", "/rollouts").json()
    messages = [{"role": "user", "content": "hello"}]
    chat(proxy, created["token"], messages)  # the tool-call turn; next comes the long one
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", headers={"authorization": f"Bearer {created['token']}"},
                      json={"messages": messages, "stream": True}, timeout=30) as resp:
        lines = resp.iter_lines()
        assert [next(lines) for _ in range(4)]
    # the client is gone: the call is recorded and nothing keeps generating
    deadline = time.monotonic() + 5
    while proxy.admin("GET", "/health").json()["inflight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.admin("GET", "/health").json()["inflight"] == 0
    calls = proxy.admin("GET", f"/rollouts/{created['id']}/trajectory").json()["calls"]
    assert [c["status"] for c in calls] == ["ok", "client_disconnected"]
    whole = len(policy_template().encode(LONG.strip())) + 1
    assert 0 < calls[1]["tokens_out"] < whole  # the engine stopped when the client left


def test_the_model_only_listener_serves_rollouts_and_no_admin_route(tmp_path, tokenizer_dir):
    """forge proxy --model-listen (the in-cluster proxy's port for pods): model calls with a rollout token
    work there; the admin API does not exist there, even with the admin token."""
    process = ProxyProcess(tmp_path, tokenizer_dir)
    model_port = free_port()
    process.extra = ["--model-listen", f"127.0.0.1:{model_port}"]
    process.start()
    try:
        token = process.admin("POST", "/rollouts", json={"metadata": {}}).json()["token"]
        model = f"http://127.0.0.1:{model_port}"
        answer = httpx.post(model + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                            json={"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert answer.status_code == 200, answer.text
        admin = httpx.post(model + "/rollouts", headers={"authorization": f"Bearer {ADMIN}"}, json={}, timeout=10)
        assert admin.status_code == 404
    finally:
        process.stop()
