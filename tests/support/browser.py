"""Open a duplexctl HTML page in headless Chromium with the network blocked, and report what
happened: console errors, page errors, requests that left (or tried to leave) the page,
charts drawn, and a full-page screenshot.

Driver: Python Playwright against Debian's ``/usr/bin/chromium`` (``executable_path``; no
browser is downloaded). One Chromium per test process, started with the flags a test machine
needs at the first page a test opens and closed at the end of the test session
(``tests/conftest.py`` calls :func:`close_browser`). Playwright's sync API keeps an event loop
running in the thread that started it (``asyncio.run`` then fails there), so the browser
lives in a thread of its own and every page is opened there. Every page opens in a fresh, empty
browser context (no cookies, storage or cache from another test) that is offline and whose
every request but the page's own ``file:`` URL (or an inline ``data:``) is aborted and
recorded, so a page that needs the network fails its test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def screenshot_path(tmp_path: Path, name: str) -> Path:
    """Where a test keeps its screenshot: ``$DUPLEXCTL_SCREENSHOTS/NAME.png`` when set (to
    look at them after the run), else the test's own tmp_path (pytest keeps the last
    three runs' under its basetemp)."""
    folder = os.environ.get("DUPLEXCTL_SCREENSHOTS")
    return (Path(folder) if folder else tmp_path) / f"{name}.png"


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None (install.sh installs both)."""
    if shutil.which(CHROMIUM) is None:
        return f"{CHROMIUM} not installed (apt package chromium; bash install.sh)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright not installed (pip install -e '.[dev]')"
    return None


def needs_browser(test: F) -> F:
    """Mark a test that opens a page: ``browser`` (what it costs), and skipped with the
    reason where Chromium or Playwright is missing (install.sh installs both)."""
    missing = chromium_missing()
    marked: F = pytest.mark.browser(test)
    return pytest.mark.skipif(missing is not None, reason=str(missing))(marked)


@dataclass
class Opened:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests_out: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    charts: int = 0
    charts_rendered: int = 0
    chart_errors: list[str] = field(default_factory=list)
    svg_marks: int = 0
    facts: dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list[str]:
        return [
            *(f"console: {e}" for e in self.console_errors),
            *(f"page error: {e}" for e in self.page_errors),
            *(f"request left the page: {u}" for u in self.requests_out),
            *(f"request failed: {u}" for u in self.failed_requests),
            *(f"chart error: {e}" for e in self.chart_errors),
        ]


_running: dict[str, Any] = {}  # the browser's thread, and inside it Playwright and Chromium


def _in_browser_thread(job: Callable[[], T]) -> T:
    """Run ``job`` in the thread that owns the test process's Chromium (started on first use)."""
    if "thread" not in _running:
        _running["thread"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
    return _running["thread"].submit(job).result()


def _browser() -> Any:
    if "browser" not in _running:
        from playwright.sync_api import sync_playwright

        _running["playwright"] = pw = sync_playwright().start()
        _running["browser"] = pw.chromium.launch(
            executable_path=_at_its_priority(CHROMIUM), headless=True, args=FLAGS
        )
    return _running["browser"]


def _at_its_priority(executable: str) -> str:
    """``executable`` behind a launcher that keeps Chromium at the CPU priority of the test
    that opened the first page (docs/testing.md "Lanes and groups"). Two things lifted it
    above the quiet lane's timed loads, which then failed as invalid_pacing at one session:

    * run as root, Chromium raised its browser process to nice -8: the launcher takes that
      right away (``setpriv --bounding-set -sys_nice``);
    * Playwright starts the browser in a session of its own (``setsid``), and with Linux's
      autogroup scheduling (``kernel.sched_autogroup_enabled``, on here) a session is a group
      that shares the CPU with the test run's session as an equal, whatever the niceness of
      the processes inside: the launcher gives its group the niceness it inherited.

    Without setpriv, ``executable`` itself."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return executable
    folder = Path(tempfile.mkdtemp(prefix="duplexctl-chromium-"))
    launcher = folder / "chromium"
    launcher.write_text(
        "#!/bin/sh\n"
        'echo "$(nice)" > /proc/self/autogroup 2>/dev/null\n'
        f'exec {setpriv} --bounding-set -sys_nice -- {executable} "$@"\n'
    )
    launcher.chmod(0o755)
    return str(launcher)


def close_browser() -> None:
    """Close the test process's Chromium and its thread, if a test started them."""
    thread = _running.pop("thread", None)
    if thread is None:
        return

    def close() -> None:
        browser, pw = _running.pop("browser", None), _running.pop("playwright", None)
        if browser is not None:
            browser.close()
        if pw is not None:
            pw.stop()

    thread.submit(close).result()
    thread.shutdown()


def open_page(path: Path, screenshot: Path, *, evaluate: str | None = None) -> Opened:
    """Load ``path`` in a fresh context, wait until every chart has drawn (or failed),
    screenshot it."""
    return _in_browser_thread(lambda: _open(path, screenshot, evaluate))


def _open(path: Path, screenshot: Path, evaluate: str | None) -> Opened:
    seen = Opened()
    context = _browser().new_context(viewport={"width": 1280, "height": 900}, offline=True)
    try:
        page = context.new_page()
        page.on(
            "console",
            lambda m: seen.console_errors.append(m.text) if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: seen.page_errors.append(str(e)))
        page.on("requestfailed", lambda r: seen.failed_requests.append(r.url))
        page_url = path.resolve().as_uri()

        def route(r: Any) -> None:
            url = r.request.url
            if url == page_url or url.startswith("data:"):
                r.continue_()
            else:
                seen.requests_out.append(url)
                r.abort()

        context.route("**/*", route)
        page.goto(page_url, wait_until="load", timeout=60_000)
        page.wait_for_function(
            "Array.from(document.querySelectorAll('div.chart'))"
            ".every(e => e.hasAttribute('data-rendered') || e.hasAttribute('data-error'))",
            timeout=60_000,
        )
        seen.charts = page.locator("div.chart").count()
        seen.charts_rendered = page.locator("div.chart[data-rendered]").count()
        seen.chart_errors = [
            str(e)
            for e in page.eval_on_selector_all(
                "div.chart[data-error]", "els => els.map(e => e.id + ': ' + e.dataset.error)"
            )
        ]
        seen.svg_marks = page.evaluate(
            "document.querySelectorAll('div.chart svg .mark-line path, div.chart svg .mark-symbol path,"
            " div.chart svg .mark-rect path, div.chart svg .mark-area path, div.chart svg .mark-rule line').length"
        )
        if evaluate:
            seen.facts = page.evaluate(evaluate)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=True)
    finally:
        context.close()
    return seen
