"""Ctrl-C during an LLM proposal: forge synth stops at once (exit 130) instead of after the model answers,
which on a CPU machine can be minutes away."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def test_ctrl_c_while_the_proposer_model_is_thinking_stops_synth_at_once(tmp_path: Path):
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()  # never answers
    port = server.getsockname()[1]
    synth = subprocess.Popen([sys.executable, "-m", "openforgerl", "synth", "--domain", "gui", "--proposer", "llm",
                              "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1", "-n", "1", "--no-build",
                              "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 120
        while not accepted and synth.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert accepted, f"the proposer never called its model: {synth.communicate(timeout=30)}"
        time.sleep(0.5)
        sent = time.monotonic()
        synth.send_signal(signal.SIGINT)
        out, err = synth.communicate(timeout=90)
        assert synth.returncode == 130 and "the candidates decided so far are kept" in err, err[-2000:]
        # the proposer's model timeout is 120 s (it used to wait that out); 60 s leaves room for 2 busy cores
        assert time.monotonic() - sent < 60
        decided = (tmp_path / "out" / "candidates.jsonl").read_text()
        assert decided == ""  # the proposal in flight is not recorded: --resume proposes it again
    finally:
        if synth.poll() is None:
            synth.kill()
        server.close()
        for connection in accepted:
            connection.close()
