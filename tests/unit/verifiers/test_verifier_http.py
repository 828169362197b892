"""HTTP state check against a real server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROUTES = {
    "/api/state": (200, json.dumps({"cart": {"items": [{"sku": "A1", "qty": 2}]}, "paid": True})),
    "/page": (200, "<h1>Order confirmed</h1>"),
    "/broken": (200, "{not json"),
    "/missing": (404, "nope"),
    "/moved": (302, ""),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        status, body = ROUTES.get(self.path, (404, ""))
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "http://example.com/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_status_and_json_path(box, server):
    spec = {"type": "http", "url": f"{server}/api/state", "json_path": "$.cart.items[0].qty", "equals": 2}
    assert box.verify(spec).reward == 1.0
    verdict = box.verify({**spec, "equals": 3})
    assert verdict.reward == 0.0 and verdict.metrics["actual"] == 2


def test_body_contains_and_expected_status(box, server):
    assert box.verify({"type": "http", "url": f"{server}/page", "body_contains": "confirmed"}).reward == 1.0
    assert box.verify({"type": "http", "url": f"{server}/page", "body_contains": "cancelled"}).reward == 0.0
    assert box.verify({"type": "http", "url": f"{server}/missing"}).reward == 0.0
    assert box.verify({"type": "http", "url": f"{server}/missing", "expect_status": 404}).reward == 1.0


def test_a_body_that_is_not_json_fails_with_the_reason(box, server):
    verdict = box.verify({"type": "http", "url": f"{server}/broken", "json_path": "$.a", "equals": 1})
    assert verdict.reward == 0.0 and "not JSON" in verdict.metrics["error"]


def test_a_redirect_off_loopback_is_not_followed(box, server):
    verdict = box.verify({"type": "http", "url": f"{server}/moved"})
    assert verdict.reward == 0.0 and verdict.metrics["status"] == 302


def test_server_down_fails_with_the_connection_error(box):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    verdict = box.verify({"type": "http", "url": f"http://127.0.0.1:{port}/api/state", "timeout_sec": 2})
    assert verdict.reward == 0.0 and "refused" in verdict.metrics["error"].lower()


def test_base_url_file_supplies_the_per_container_port(box, server):
    box.write("/run/forge-webapp/url", server + "\n")
    spec = {"type": "http", "url": "/api/state", "base_url_file": "/run/forge-webapp/url",
            "json_path": "$.paid", "equals": True}
    assert box.verify(spec).reward == 1.0


def test_a_base_url_file_pointing_off_loopback_is_refused(box):
    box.write("/run/forge-webapp/url", "http://example.com:80\n")
    spec = {"type": "http", "url": "/api/state", "base_url_file": "/run/forge-webapp/url"}
    verdict = box.verify(spec)
    assert verdict.reward == 0.0 and "not a loopback" in verdict.metrics["error"]
