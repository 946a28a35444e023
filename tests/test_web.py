"""`lace web` in a real headless Chromium: without the token the page is refused; with the
address it printed the token becomes a strict cookie, the page draws the first screen, a typed
request is answered by the offline demo model, no key reaches the page, and nothing leaves
127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.web_page import CHROMIUM, LAUNCH_ARGS, TerminalScreen, lace_web, wait_for_text

SECRET = "sk-lace-web-test-0123456789abcdef"
REQUEST = "Plan a small launch: write the announcement and list the risks."


@pytest.mark.slow
def test_the_app_draws_in_a_browser_and_answers_a_typed_request(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import Route, sync_playwright

    blocked: list[str] = []

    def loopback_only(route: Route) -> None:
        """The page may load from lace web only: anything else (a web font) is refused."""
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    terminal = TerminalScreen()
    with lace_web(tmp_path, env={"OPENAI_API_KEY": SECRET}) as served, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 860})
            page.route("**/*", loopback_only)
            page.on("websocket", terminal.watch)
            refused = page.goto(served.url)
            assert refused is not None and refused.status == 401
            assert "lace web needs its token" in page.inner_text("body")
            page.goto(served.login)  # the address lace web printed, with its token
            assert page.url == f"{served.url}/"  # the token went to a cookie, out of the address
            (cookie,) = page.context.cookies()
            assert (cookie["value"], cookie["httpOnly"], cookie["sameSite"]) == (
                served.token, True, "Strict")
            html = page.content()
            wait_for_text(page, terminal, "lace · a task board for LLM agents", 90)
            first = terminal.text()
            assert "Model  demo/coordinator" in first
            assert "✓ no key needed" in first
            assert "lace — new session" in first  # the title bar
            page.wait_for_selector("body.-first-byte")  # the page drew what it was sent
            page.screenshot(path=str(tmp_path / "first.png"))

            page.focus(".xterm-helper-textarea")  # the keyboard, without a click in the app
            page.keyboard.type(REQUEST)
            page.keyboard.press("Enter")
            wait_for_text(page, terminal, "All 4 tasks are done.", 120)  # 3 parts, a summing-up
            answered = terminal.text()
            assert "lace · a task board" not in answered  # the first screen went away
            assert "lace — session lace_" in answered
            page.screenshot(path=str(tmp_path / "answered.png"))
        finally:
            browser.close()
    assert SECRET not in html
    assert all(SECRET.encode() not in frame for frame in terminal.received)
    assert {urlsplit(address).hostname for address in blocked} <= {"fonts.googleapis.com"}
