"""Free loopback ports for tests and benchmarks that start servers of their own."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def consecutive_ports(n: int) -> int:
    """A port p with p .. p+n-1 free on 127.0.0.1 (a sharded proxy: its admin front, then one per shard)."""
    for _ in range(100):
        port = free_port()
        if port + n > 65000:
            continue
        try:
            for offset in range(1, n):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no run of {n} free ports on 127.0.0.1")
