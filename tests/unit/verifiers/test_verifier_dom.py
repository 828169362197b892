"""DOM check where no browser exists: it fails with the reason (a real browser: tests/integration)."""

from __future__ import annotations


def test_without_a_browser_the_dom_check_scores_0_with_the_reason(box):
    box.write("/run/forge-webapp/url", "http://127.0.0.1:9/\n")
    spec = {"type": "dom", "url": "/", "base_url_file": "/run/forge-webapp/url", "selector": "h1",
            "text_equals": "Done", "timeout_sec": 5}
    verdict = box.verify(spec, env={"CHROMIUM_PATH": "/nonexistent/chromium"})
    assert verdict.reward == 0.0 and verdict.error is None
    assert "playwright" in verdict.metrics["error"].lower() or "chromium" in verdict.metrics["error"]
