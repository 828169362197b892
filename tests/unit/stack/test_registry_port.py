"""A registry port held by something else is reported with the port and the fix, never taken over."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from openforgerl.errors import ResourceError
from openforgerl.stack import registry
from openforgerl.stack.registry import PORT_ENV, RegistryPart, registry_address


@pytest.fixture
def http_server() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 that is not a registry (404 everywhere)."""

    class NotARegistry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotARegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_silent_listener_blocks_the_registry_with_the_port_named(silent_listener, monkeypatch):
    monkeypatch.setattr(registry, "PROBE_TIMEOUT_S", 0.3)  # silence is silence after 0.3 s as after 3 s
    part = RegistryPart(port=silent_listener)
    status = part.check()
    assert not status.ready
    assert f"port {silent_listener}" in status.detail and PORT_ENV in status.fix
    with pytest.raises(ResourceError) as caught:
        part.ensure(lambda action: pytest.fail(f"must not change anything, did: {action.did}"))
    assert f"port {silent_listener} on 127.0.0.1 is taken" in str(caught.value)
    assert PORT_ENV in caught.value.fix


def test_http_server_that_is_not_a_registry_is_named_as_such(http_server):
    status = RegistryPart(port=http_server).check()
    assert not status.ready
    assert "not a Docker registry" in status.detail and "HTTP 404" in status.detail


def test_free_port_means_not_running_and_stack_up_fixes_it():
    status = RegistryPart(port=free_port()).check()
    assert not status.ready
    assert "no registry running" in status.detail and status.fix == "forge stack up"


def test_port_comes_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv(PORT_ENV, "5123")
    assert RegistryPart().port == 5123
    assert registry_address() == "127.0.0.1:5123"
    assert RegistryPart(port=5007).port == 5007
