"""A real full disk under `forge proxy`: a small tmpfs as its data dir.

While the disk is full, calls get a 507 in the caller's dialect and nothing stays in flight; once
space is back (if not before), ``finish`` succeeds and the rollout's recorded calls are all there.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ADMIN = {"authorization": "Bearer full-disk-admin-token"}
PORT = 18247


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the unit tests inject ENOSPC instead")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def call(token: str, text: str = "hi") -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{PORT}/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "smollm2", "messages": [{"role": "user", "content": text}]}, timeout=30)


def test_a_full_data_dir_gives_507_in_the_dialect_and_finish_works_once_space_is_back(tmp_path: Path):
    with tmpfs(tmp_path / "data", "160k") as data:
        proxy = subprocess.Popen([sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--port",
                                  str(PORT), "--admin-token", ADMIN["authorization"][7:], "--data-dir", str(data)],
                                 stderr=subprocess.DEVNULL, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=2).status_code == 200:
                        break
                time.sleep(0.3)
            created = httpx.post(f"http://127.0.0.1:{PORT}/rollouts", headers=ADMIN, json={}).json()
            assert call(created["token"]).status_code == 200
            filler = data / "filler"
            with contextlib.suppress(OSError):  # fill what is left
                filler.write_bytes(b"x" * 4 * 1024 * 1024)
            full = call(created["token"], "word " * 20000)  # a record larger than the slack of any page
            health = httpx.get(f"http://127.0.0.1:{PORT}/health").json()
            finish = f"http://127.0.0.1:{PORT}/rollouts/{created['id']}/finish"
            while_full = httpx.post(finish, headers=ADMIN, json={"reward": 1, "status": "success"})
            filler.unlink()
            finished = while_full if while_full.status_code == 200 else \
                httpx.post(finish, headers=ADMIN, json={"reward": 1, "status": "success"})
            trajectory = httpx.get(f"http://127.0.0.1:{PORT}/rollouts/{created['id']}/trajectory", headers=ADMIN).json()
        finally:
            proxy.terminate()
            proxy.wait(timeout=30)
    assert full.status_code == 507 and full.headers["content-type"].startswith("application/json")
    assert "error" in full.json()  # the OpenAI dialect's error object, not a bare 500
    assert health["inflight"] == 0
    assert while_full.status_code in (200, 507)  # a finish line small enough for the last page's slack fits
    assert finished.status_code == 200 and trajectory["status"] == "success"
    assert [c["status"] for c in trajectory["calls"]][0] == "ok"
