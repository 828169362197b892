"""Hundreds of rollouts at once on a proxy started with a login shell's limit of open files.

Each harness in flight holds a connection to the proxy and the proxy holds its rollout's log: a soft limit of
1024 (a login shell's usual) ran out at a few hundred rollouts, and the proxy then dropped connections it could
not accept and refused to record. The real ``forge proxy`` process here starts with a soft limit of 256 (the
hard one as it is) and serves 300 streamed calls at once, each on its own connection.
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from openforgerl.rollout.proxy.store import Store, describe
from openforgerl.testing.proxy import policy_template

ADMIN = "open-files-admin-token"
SOFT = 256
AT_ONCE = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def low_soft_limit() -> None:  # in the child, before exec: what a login shell's `ulimit -Sn 256` would leave
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4 * AT_ONCE,
                    reason="this machine's hard limit of open files is too low for the test")
def test_a_proxy_started_with_a_low_soft_limit_serves_hundreds_of_harnesses_at_once(tmp_path: Path):
    tokenizer = tmp_path / "tokenizer"
    policy_template().tokenizer.save_pretrained(str(tokenizer))
    script = tmp_path / "script.yaml"  # each answer streams for ~1 s: the calls overlap
    script.write_text(yaml.safe_dump({"token_delay_s": 0.05, "turns": [{"text": "word " * 20}]}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--script", str(script), "--port",
         str(port), "--admin-token", ADMIN, "--data-dir", str(tmp_path / "data"), "--tokenizer", str(tokenizer),
         "--workers", "1"], preexec_fn=low_soft_limit, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "forge proxy did not start"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        limits = Path(f"/proc/{proc.pid}/limits").read_text().split("Max open files")[1].split()
        assert int(limits[0]) > SOFT and limits[0] == limits[1], limits  # soft raised to the hard limit

        async def harnesses() -> list[str]:
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=AT_ONCE + 10)) as client:
                created = [(await client.post(url + "/rollouts", json={},
                                              headers={"authorization": f"Bearer {ADMIN}"})).json()
                           for _ in range(AT_ONCE)]

                async def call(rollout: dict) -> str:
                    try:
                        answer = await client.post(url + "/v1/chat/completions", json={
                            "messages": [{"role": "user", "content": "hi"}], "stream": True},
                            headers={"authorization": f"Bearer {rollout.get('token')}"})
                    except httpx.TransportError as exc:
                        return f"{type(exc).__name__}"
                    ended = answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]")
                    return "ok" if ended else f"{answer.status_code} {answer.text[-200:]}"
                return await asyncio.gather(*(call(rollout) for rollout in created))
        outcomes = asyncio.run(harnesses())
        failed = [o for o in outcomes if o != "ok"]
        assert not failed, f"{len(failed)} of {AT_ONCE} calls failed, e.g. {failed[:3]}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_log_that_cannot_be_opened_for_want_of_descriptors_says_which_limit_to_raise(tmp_path: Path):
    what, fix, status = describe(OSError(errno.EMFILE, "Too many open files"))
    assert what == "too many open files" and "ulimit -n" in fix and status == 503
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SOFT, hard), hard))
    try:  # open logs take at most an eighth of the descriptors: the rest are for connections
        assert Store(tmp_path / "low").max_open == min(SOFT, hard) // 8
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert Store(tmp_path / "high").max_open == min(256, soft // 8)


def test_out_of_descriptors_the_store_closes_idle_logs_and_goes_on_recording(tmp_path: Path):
    store = Store(tmp_path, max_open=10_000)  # as if the LRU bound had not held: every log stays open
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 12, hard))  # room for a dozen files, no more
    try:
        logs = [store.open_log(f"r-{i}", new=True) for i in range(40)]  # past the dozen: idle ones are closed
        for round_ in range(2):
            for rollout_log in logs:  # each write reopens its log, closing idle others when out of descriptors
                rollout_log.append({"t": "call", "round": round_}, sync=False)
        assert sum(rollout_log._fd >= 0 for rollout_log in logs) <= 12
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [len(p.read_text().splitlines()) for p in sorted(store.root.glob("*.log"))] == [2] * 40  # nothing lost


def test_a_proxy_out_of_descriptors_says_so_instead_of_blaming_the_engine():
    from openforgerl.errors import ProviderError
    from openforgerl.rollout.proxy.engine import VLLMEngineConfig
    from openforgerl.rollout.proxy.engines.vllm import VLLMEngine

    engine = VLLMEngine(VLLMEngineConfig(base_url="http://127.0.0.1:9"))

    async def connect(exc: OSError) -> ProviderError:
        with pytest.raises(ProviderError) as raised:
            async with engine._errors("failed to stream"):
                raise exc
        return raised.value
    ours = asyncio.run(connect(OSError(errno.EMFILE, "Too many open files")))
    assert "out of file descriptors (ulimit -n" in str(ours) and "limit of open files" in ours.fix
    theirs = asyncio.run(connect(ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    assert "forge serve" in theirs.fix
