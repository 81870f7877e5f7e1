"""The translator page in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (`make browser` installs both; this test skips where they are missing),
against the page server in front of a real model server on 127.0.0.1 (the toy translator of
tests/serving_fixtures.py, whose outputs the test computes in plain Python too).

`TRANSLATOR_PAGE_SCREENSHOT=path.png` saves a screenshot of the page with a translation and
its heat map.
"""

import os

import numpy as np
import pytest

from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    SOURCE_TOKENS_OUTPUT,
    TARGET_TOKENS_OUTPUT,
    TRANSLATION_OUTPUT,
)
from tests.model_server_fixtures import PREDICT_PATH, http
from tests.serving_fixtures import expected_beam, expected_greedy
from tests.web_fixtures import page_server, predict_body, toy_model_server

pytestmark = pytest.mark.large

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Bounds on a hang, not measurements: each wait ends as soon as the page shows its state.
WAIT_SECONDS = 60
# The page's text box holds two sentences around a blank line, which stays blank.
LINES = ["hola mundo grande", "", "el gato"]


@pytest.fixture
def browser(tmp_path):
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(
            f"no {CHROMIUM} and {CHROMEDRIVER}: `make browser` (as root) installs Debian's "
            "chromium and chromium-driver"
        )
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # Root, as CI runs it.
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        # Without these Chromium reaches for outside hosts this machine cannot reach.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=900,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def rest_outputs(rest_port, signature, texts):
    status, answer = http(
        "POST", f"http://127.0.0.1:{rest_port}{PREDICT_PATH}", predict_body(signature, texts)
    )
    assert status == 200, answer
    return answer["outputs"]


def test_the_page_translates_draws_the_attention_and_says_when_the_server_is_down(
    browser, exports, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(browser, WAIT_SECONDS)

    def element(element_id):
        return browser.find_element(By.ID, element_id)

    def output_lines():
        return [line.text for line in browser.find_elements(By.CSS_SELECTOR, "#output .line")]

    def heatmap_size():
        rows = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr")
        columns = browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th")
        cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody td")
        return len(rows), len(columns), len(cells)

    def translate_with_ctrl_enter(text):
        box = element("source")
        box.clear()
        box.send_keys(text)
        box.send_keys(Keys.CONTROL, Keys.ENTER)

    model_server = toy_model_server(exports, tmp_path / "models")
    page = page_server(f"http://127.0.0.1:{model_server.rest_port}")
    try:
        browser.get(page.url)
        wait.until(lambda _: browser.execute_script("return document.body.dataset.ready"))
        sentences = [line for line in LINES if line]

        translate_with_ctrl_enter("\n".join(LINES))
        wait.until(lambda _: element("status").text.startswith("Translated 2 lines in"))
        served = rest_outputs(model_server.rest_port, GREEDY_SIGNATURE, sentences)
        assert served[TRANSLATION_OUTPUT] == [expected_greedy(s, 1) for s in sentences]
        assert output_lines() == [served[TRANSLATION_OUTPUT][0], "", served[TRANSLATION_OUTPUT][1]]
        assert "(greedy)" in element("status").text

        # The first line's attention is drawn: output pieces down, source pieces across.
        for row, sentence in ((0, LINES[0]), (2, LINES[2])):
            Select(element("attention-line")).select_by_value(str(row))
            aligned = rest_outputs(model_server.rest_port, ALIGNMENTS_SIGNATURE, [sentence])
            targets = [token for token in aligned[TARGET_TOKENS_OUTPUT][0] if token]
            sources = [token for token in aligned[SOURCE_TOKENS_OUTPUT][0] if token]
            expected_size = (len(targets), len(sources), len(targets) * len(sources))
            wait.until(lambda _, size=expected_size: heatmap_size() == size)
            weights = np.array(aligned[ALIGNMENT_OUTPUT][0])[: len(targets), : len(sources)]
            first_cell = browser.find_element(By.CSS_SELECTOR, "#heatmap tbody td")
            assert first_cell.get_attribute("title").endswith(f"{weights[0, 0]:.2f}")
        if os.environ.get("TRANSLATOR_PAGE_SCREENSHOT"):
            browser.save_screenshot(os.environ["TRANSLATOR_PAGE_SCREENSHOT"])

        # Beam search, with the keyboard only: an arrow moves the radio group's choice, Tab
        # reaches the button, Enter presses it.
        browser.find_element(By.CSS_SELECTOR, f'input[value="{GREEDY_SIGNATURE}"]').send_keys(
            Keys.ARROW_RIGHT
        )
        assert browser.find_element(
            By.CSS_SELECTOR, f'input[value="{BEAM_SIGNATURE}"]'
        ).is_selected()
        browser.switch_to.active_element.send_keys(Keys.TAB)
        assert browser.switch_to.active_element == element("translate")
        browser.switch_to.active_element.send_keys(Keys.ENTER)
        wait.until(lambda _: "(beam search)" in element("status").text)
        served = rest_outputs(model_server.rest_port, BEAM_SIGNATURE, sentences)
        assert served[TRANSLATION_OUTPUT] == [expected_beam(s, 1) for s in sentences]
        assert output_lines() == [served[TRANSLATION_OUTPUT][0], "", served[TRANSLATION_OUTPUT][1]]

        # At 320 px wide nothing spills sideways (the heat map scrolls in its own box).
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 320, "height": 800, "deviceScaleFactor": 1, "mobile": True},
        )
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 320
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

        element("source").clear()
        element("translate").click()
        wait.until(lambda _: element("error").is_displayed())
        assert "nothing to translate" in element("error").text

        model_server.kill()
        translate_with_ctrl_enter("hola")
        wait.until(lambda _: element("error").is_displayed())
        assert element("error").text.startswith("The model server is not answering")
        assert "Is it running?" in element("error").text
    finally:
        page.shutdown()
        page.server_close()
        model_server.kill()
