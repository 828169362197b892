"""One real turn of a harness CLI against a stand-in model, offline: how an install warms Node's compile cache.

``python -m openforgerl.rollout.harnesses.warmup PLAN.json`` is what ``forge harness install`` runs, inside
a fresh network namespace where it can (``unshare -n``). It brings that namespace's loopback up, serves a
stand-in OpenAI chat model there (every request is answered "Done.", streamed or not), writes the plan's
files, runs its command with its environment and exits with the command's status. Node, pointed at a
compile cache by that environment, leaves there the code of every module the CLI loaded on the way.

Invariant: the command is given no endpoint but the stand-in on 127.0.0.1; in its own network namespace (an
install as root) there is nothing else to reach, so a turn that reached for anything else fails here, at
install, instead of in a rollout.
"""

from __future__ import annotations

import fcntl
import json
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ANSWER = "Done."
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """Bring ``lo`` up (a fresh network namespace starts with it down); a no-op where it is up."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "warm-up", "object": "chat.completion.chunk", "created": 0, "model": "warm-up",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class StandIn(BaseHTTPRequestHandler):
    """``POST .../chat/completions`` answers "Done."; ``GET .../models`` lists one model."""

    protocol_version = "HTTP/1.1"

    def _send(self, content_type: str, payload: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._send("application/json", json.dumps({"object": "list", "data": [{"id": "warm-up"}]}).encode())

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send("application/json", json.dumps({"error": {"message": f"no route {self.path}"}}).encode(), 404)
        elif body.get("stream"):
            self._send("text/event-stream", _chunk({"role": "assistant", "content": ANSWER}) + _chunk({}, "stop")
                       + b"data: [DONE]\n\n")
        else:
            completion = {"id": "warm-up", "object": "chat.completion", "created": 0, "model": "warm-up",
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": ANSWER}}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            self._send("application/json", json.dumps(completion).encode())

    def log_message(self, *args: object) -> None:
        pass


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    loopback_up()
    server = ThreadingHTTPServer(("127.0.0.1", plan["port"]), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for path, text in plan["files"].items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    try:
        out = subprocess.run(plan["argv"], env=plan["env"], cwd=plan["cwd"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=plan["timeout"])
    except subprocess.TimeoutExpired:
        print(f"the warm-up turn did not end within {plan['timeout']} s", file=sys.stderr)
        return 124
    finally:
        server.shutdown()
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-2000:] or out.stdout[-2000:])
    return out.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
