"""DOM / accessibility-tree check for forge_verify: Playwright driving Debian's Chromium, headless.

The only runner module that needs more than the stdlib: the playwright Python package and
/usr/bin/chromium must be in the image (the gui template). Invariant: the browser is a fresh
headless profile that only reaches loopback — any other request is aborted — so what the check
sees is the app's state in this container, never a cached or remote page.
"""

from __future__ import annotations

import atexit
import os
import site
import sys
from urllib.parse import urlsplit

from forge_state import resolve_url

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def check_dom(spec: dict, ctx) -> tuple[bool, dict]:
    url = resolve_url(spec, ctx)
    timeout_ms = spec.get("timeout_sec", 10.0) * 1000
    context = _browser().new_context()  # a fresh profile per check: no cookies or storage carried over
    try:
        page = context.new_page()
        page.route("**/*", _loopback_only)
        response = page.goto(url, wait_until="load", timeout=timeout_ms)
        details = {"url": url, "status": response.status if response else None}
        if spec.get("wait_for"):
            page.wait_for_selector(spec["wait_for"], timeout=timeout_ms)
        return _judge_page(page, spec, details, timeout_ms)
    finally:
        context.close()


_SESSION: list = []  # [playwright, browser]: one browser for every dom check of this run


def _browser():
    if not _SESSION:
        playwright = _playwright()().start()
        executable = os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium"
        try:
            browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        except Exception:
            playwright.stop()
            raise
        _SESSION.extend([playwright, browser])
        atexit.register(_close)
    return _SESSION[1]


def _close() -> None:
    playwright, browser = _SESSION
    try:
        browser.close()
    finally:
        playwright.stop()


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        # The runner starts with -S (no site-packages); the image's own are added for this kind only.
        sys.path.extend(p for p in site.getsitepackages() if p not in sys.path)
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise RuntimeError(f"the dom check needs the playwright Python package in the image ({exc}); "
                               "copy playwright and greenlet into the image's "
                               "/usr/local/lib/python3.11/dist-packages") from None
    return sync_playwright


def _loopback_only(route) -> None:
    host = urlsplit(route.request.url).hostname or ""
    if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOOPBACK or host.startswith("127."):
        route.continue_()
    else:
        route.abort()


def _judge_page(page, spec: dict, details: dict, timeout_ms: float) -> tuple[bool, dict]:
    passed = True
    selector = spec.get("selector")
    if selector:
        locator = page.locator(selector)
        details["count"] = locator.count()
        if spec.get("count") is not None:
            passed = passed and details["count"] == spec["count"]
        if spec.get("text_equals") is not None or spec.get("text_contains") is not None:
            text = locator.first.inner_text(timeout=timeout_ms).strip() if details["count"] else None
            details["text"] = text[:500] if text is not None else None
            passed = passed and text is not None and _text_ok(text, spec)
    if spec.get("aria_contains"):
        scope = page.locator(selector or "body")
        snapshot = "\n".join(scope.nth(i).aria_snapshot(timeout=timeout_ms) for i in range(min(scope.count(), 50)))
        missing = [line for line in spec["aria_contains"] if line.strip() not in snapshot]
        details.update(aria_missing=missing, aria_snapshot=snapshot[:2000])
        passed = passed and not missing
    return passed, details


def _text_ok(text: str, spec: dict) -> bool:
    if spec.get("text_equals") is not None and text != spec["text_equals"]:
        return False
    return spec.get("text_contains") is None or spec["text_contains"] in text
