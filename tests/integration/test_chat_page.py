"""The chat page at `/` of `hearth serve`, driven in headless chromium through selenium.

One server (with --api-key, so the key field is exercised too) and one browser serve the whole
flow: streaming, tok/s, multi-turn, HTTP errors shown in the conversation, Stop, restore after a
reload, New chat; then the Markdown renderer's escaping is checked inside the page.

Screenshots go to $HEARTH_TEST_ARTIFACTS (default: the test's tmp dir); their paths are printed.
HEARTH_CHAT_PAGE_URL=http://HOST:PORT runs the flow against a server already running there
(started with --api-key KEY below) instead of starting one."""
import os
import shutil
import tempfile
import time
import urllib.request

import pytest

from server import Server

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
KEY = "page-test-key"
WAIT = 30  # seconds any single step may take before it counts as a failure

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def base_url(request):
    url = os.environ.get("HEARTH_CHAT_PAGE_URL")
    if url:
        yield url.rstrip("/")
        return
    request.getfixturevalue("starter")
    with Server("smollm2", "--max-tokens", "64", "--api-key", KEY) as s:
        yield s.url


@pytest.fixture(scope="module")
def driver():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"chromium or chromedriver absent ({CHROMIUM}, {CHROMEDRIVER}); "
                    "run scripts/test-deps.sh")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="hearth-chromium-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--window-size=1200,900", "--no-first-run"):
        opts.add_argument(arg)
    # An explicit driver path keeps selenium-manager from going to the network.
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(WAIT)
    d.set_script_timeout(WAIT)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def artifacts(tmp_path):
    path = os.environ.get("HEARTH_TEST_ARTIFACTS") or str(tmp_path)
    os.makedirs(path, exist_ok=True)
    return path


def until(driver, what, cond, timeout=WAIT):
    """Polls cond(driver) until it is truthy; fails naming what was awaited."""
    def safe(d):
        try:
            return cond(d)
        except StaleElementReferenceException:  # the page re-rendered under us: poll again
            return False
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(safe, f"timed out: {what}")


def el(driver, sel):
    return driver.find_element(By.CSS_SELECTOR, sel)


def replies(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")


def reply_text(driver, i):
    return replies(driver)[i].find_element(By.CSS_SELECTOR, ".body").text


def set_field(driver, sel, value):
    f = el(driver, sel)
    f.clear()
    f.send_keys(value)


def screenshot(driver, artifacts, name):
    path = os.path.join(artifacts, name)
    driver.save_screenshot(path)
    print(f"screenshot: {path}")
    return path


def ask(driver, text, n_before, use_enter=True):
    """Sends text; waits for streamed text in the new reply, then for its figures."""
    set_field(driver, "#prompt", text)
    if use_enter:
        el(driver, "#prompt").send_keys(Keys.ENTER)
    else:
        el(driver, "#send").click()
    until(driver, "streamed text in the new reply",
          lambda d: len(replies(d)) == n_before + 1 and reply_text(d, n_before).strip())
    # its figures once it ends: "N tokens", and tok/s, or "—" for a reply too quick to time
    # (under 50 ms from its first token: a short answer on a fast machine)
    until(driver, "the figures of the reply",
          lambda d: " tokens" in replies(d)[n_before].find_element(By.CSS_SELECTOR, ".meta").text)
    until(driver, "send usable again", lambda d: el(d, "#send").is_enabled())


def health(base_url):
    with urllib.request.urlopen(base_url + "/health", timeout=10) as r:
        return r.status


def test_chat_flow(driver, base_url, artifacts):
    t0 = time.monotonic()
    driver.get(base_url + "/")

    # Without the key, /v1/models is refused and the header says so; with it, the model shows.
    until(driver, "the header asking for an API key",
          lambda d: "API key" in el(d, "#model").text or "SmolLM2" in el(d, "#model").text)
    set_field(driver, "#api-key", KEY + Keys.TAB)  # the key is taken on change (blur)
    until(driver, "the model name in the header", lambda d: "SmolLM2" in el(d, "#model").text)
    assert not el(driver, "#stop").is_enabled()

    # Short replies keep the flow quick on a small machine.
    set_field(driver, "#max-tokens", "24")
    set_field(driver, "#system", "You are a friendly assistant.")
    ask(driver, "Hello! What is the capital of France?", 0)
    speed = replies(driver)[0].find_element(By.CSS_SELECTOR, ".speed").text
    assert speed.endswith("tok/s") or speed == "—", speed
    screenshot(driver, artifacts, "chat_page_reply.png")

    # Multi-turn: a second question (sent with the button) gets a second reply.
    ask(driver, "And of Italy?", 1, use_enter=False)
    assert len(replies(driver)) == 2
    assert [m.text for m in driver.find_elements(By.CSS_SELECTOR, "#messages .msg.user .body")] == \
        ["Hello! What is the capital of France?", "And of Italy?"]

    # An HTTP error (wrong key: 401 with a JSON body) is shown in the conversation.
    set_field(driver, "#api-key", "wrong-key" + Keys.TAB)
    set_field(driver, "#prompt", "This should be refused." + Keys.ENTER)
    until(driver, "the error message in the conversation",
          lambda d: "401" in el(d, "#messages .msg.error").text)
    until(driver, "send usable after the error", lambda d: el(d, "#send").is_enabled())
    assert len(replies(driver)) == 2  # no empty reply left behind
    set_field(driver, "#api-key", KEY + Keys.TAB)

    # Stop: a long reply is aborted soon after its first text; the partial reply stays, the
    # text stops growing and the server keeps answering.
    set_field(driver, "#max-tokens", "512")
    set_field(driver, "#prompt", "Write a long story about a dragon." + Keys.ENTER)
    until(driver, "the long reply's first text",
          lambda d: len(replies(d)) == 3 and reply_text(d, 2).strip())
    assert el(driver, "#stop").is_enabled() and not el(driver, "#send").is_enabled()
    el(driver, "#stop").click()
    until(driver, "send usable after Stop", lambda d: el(d, "#send").is_enabled())
    assert not el(driver, "#stop").is_enabled()
    partial = reply_text(driver, 2)
    assert partial.strip()
    assert "stopped" in replies(driver)[2].find_element(By.CSS_SELECTOR, ".meta").text
    time.sleep(1.0)  # bounded: long enough for several more tokens had generation continued
    assert reply_text(driver, 2) == partial, "the reply kept growing after Stop"
    assert health(base_url) == 200
    screenshot(driver, artifacts, "chat_page_stopped.png")

    # Reload: the conversation, settings and key come back from localStorage.
    before = [m.text for m in driver.find_elements(By.CSS_SELECTOR, "#messages .msg")]
    driver.refresh()
    until(driver, "the conversation restored after reload",
          lambda d: [m.text for m in d.find_elements(By.CSS_SELECTOR, "#messages .msg")] == before)
    until(driver, "the model name after reload", lambda d: "SmolLM2" in el(d, "#model").text)
    assert el(driver, "#api-key").get_attribute("value") == KEY
    assert el(driver, "#max-tokens").get_attribute("value") == "512"
    assert el(driver, "#system").get_attribute("value") == "You are a friendly assistant."

    # New chat: empty conversation; the old one is listed in the sidebar.
    el(driver, "#new-chat").click()
    until(driver, "an empty conversation",
          lambda d: not d.find_elements(By.CSS_SELECTOR, "#messages .msg"))
    assert len(driver.find_elements(By.CSS_SELECTOR, "#chats li")) >= 1
    print(f"chat flow took {time.monotonic() - t0:.1f}s")


def test_renderer_is_safe(driver, base_url):
    """Model output is escaped before any Markdown is applied; only http(s) links are made."""
    driver.get(base_url + "/")
    until(driver, "the renderer", lambda d: d.execute_script("return typeof hearthRender") == "function")
    render = lambda src: driver.execute_script("return hearthRender(arguments[0])", src)  # noqa: E731

    html = render("<img src=x onerror=alert(1)> and <script>alert(1)</script>")
    assert "&lt;img" in html and "<img" not in html and "<script" not in html

    html = render("Look:\n\n```python\nif a < b:\n    print('<b>')\n```\n")
    assert "<pre><code" in html and 'class="language-python"' in html
    assert "if a &lt; b:" in html and "<b>" not in html

    html = render("**bold** *it* `a<b` [ok](https://example.com/?a=1&b=2) [bad](javascript:alert(1))")
    assert "<strong>bold</strong>" in html and "<em>it</em>" in html and "<code>a&lt;b</code>" in html
    assert '<a href="https://example.com/?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">ok</a>' in html
    assert 'href="javascript' not in html

    html = render('[x](https://e.com/"onmouseover="alert(1))')
    assert 'href="https://e.com/&quot;onmouseover=&quot;alert(1"' in html

    html = render("# Title\n\n- one\n- two\n\n1. first\n2. second")
    assert "<h2>Title</h2>" in html and "<ul><li>one</li><li>two</li></ul>" in html
    assert "<ol><li>first</li><li>second</li></ol>" in html

    # Rendered into the page, hostile output creates no elements and runs nothing.
    injected = driver.execute_script("""
        const d = document.createElement('div');
        d.innerHTML = hearthRender('<img src=x onerror="window.pwned=1"><b>x</b>');
        return [d.querySelectorAll('img, b').length, d.textContent];""")
    assert injected[0] == 0 and "<img" in injected[1]
