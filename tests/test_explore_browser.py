"""The explore page in a real browser: Debian's chromium, headless, driven by selenium + chromedriver.

The page of ``khop_doubling`` at k = 8 (the "must show" command of issue 14) is written by the
CLI, loaded from a file:// URL, and checked: no resource is fetched over the network, every
head's attention map rendered (a plotly figure with a drawn heatmap per head), and stepping
through the stages changes what is shown (the residual figure's drawn image, the highlighted
head and program lines, the stage note). A screenshot is saved; with
``DEPTHCRAFT_SCREENSHOT=1`` it also replaces ``docs/img/explore_k8.png``.

Skipped (with the reason) only where chromium or chromedriver is not installed:
``apt-get install -y chromium chromium-driver`` (``.ci/run`` does it).
"""

import os
import shutil
import struct

import pytest

from depthcraft.verify.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="Debian's chromium and chromium-driver are not installed "
                                       "(apt-get install -y chromium chromium-driver)")

K8_INPUT = "a b c a b c a a b c c a b a c b a b c a b c a b"
#: khop_doubling at k = 8: ceil(log2 8) + 2 = 5 attention layers of one head (Thm 4.2).
K8_HEADS = 5
DOC_PNG = os.path.join(os.path.dirname(__file__), "..", "docs", "img", "explore_k8.png")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", "--hide-scrollbars"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _state(driver):
    """What is shown now: the residual figure's drawn heatmap images, highlighted elements, the note."""
    return driver.execute_script("""
        return {images: Array.from(document.querySelectorAll('#residual g.hm image'))
                          .map(function (e) { return e.getAttribute('href') || e.getAttribute('xlink:href'); }),
                current: Array.from(document.querySelectorAll('.current'))
                          .map(function (e) { return e.dataset.head || ('prog-' + e.dataset.stage); }),
                note: document.getElementById('stage-note').textContent,
                num: document.getElementById('stage-num').textContent};""")


def test_k8_page_in_headless_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = tmp_path / "k8.html"
    with pytest.raises(SystemExit) as e:
        main(["explore", "khop_doubling", "-p", "k=8", "-p", "n=24", "-p", "vocab=3", "--input", K8_INPUT,
              "-o", str(page)])
    assert e.value.code == 0
    browser.get(page.as_uri())
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return document.querySelectorAll('.head-map g.hm image').length") >= K8_HEADS)

    # no network: every resource the page loaded is local, and no script comes from elsewhere
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [r for r in resources if r.startswith(("http:", "https:"))], resources
    assert browser.execute_script("return Array.from(document.scripts).filter(s => s.src).length") == 0

    # every head's map rendered: one plotly figure per head, each with its heatmap drawn (and masked cells)
    cards = browser.find_elements(By.CSS_SELECTOR, ".head-map")
    assert len(cards) == K8_HEADS
    for card in cards:
        assert len(card.find_elements(By.CSS_SELECTOR, ".js-plotly-plot svg.main-svg")) >= 1
        assert len(card.find_elements(By.CSS_SELECTOR, "g.hm image")) == 2  # weights + the grey masked keys
    assert [c.get_attribute("data-stage") for c in cards] == ["1", "2", "3", "4", "5"]

    # the page is at most 2 MB (plotly and the figures compressed inside it)
    assert page.stat().st_size <= 2_000_000, page.stat().st_size
    # the first screen (1280 x 800) shows the current stage's attention map: the page opens at stage 1
    first = _state(browser)
    assert first["num"] == "1 / 5" and "0-0" in first["current"]
    box = browser.execute_script("var r = document.querySelector('.head-map.current').getBoundingClientRect();"
                                 "return [r.left, r.top, r.right, r.bottom, window.innerWidth, window.innerHeight];")
    assert box[0] >= 0 and box[1] >= 0 and box[2] <= box[4] and box[3] <= box[5], box

    # stepping through the stages changes what is shown
    browser.find_element(By.ID, "stage-prev").click()
    WebDriverWait(browser, 10).until(lambda d: _state(d)["num"] == "0 / 5")
    seen = [_state(browser)]
    assert seen[0]["current"] == ["prog-0"]
    nxt = browser.find_element(By.ID, "stage-next")
    for stage in range(1, 6):
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", nxt)
        nxt.click()
        WebDriverWait(browser, 10).until(lambda d: _state(d)["num"] == f"{stage} / 5")
        now = _state(browser)
        assert now["images"] != seen[-1]["images"] and now["note"] != seen[-1]["note"]
        assert f"{stage - 1}-0" in now["current"]  # the head of this stage is highlighted...
        in_view = ("var c = document.querySelector('.head-map.current').getBoundingClientRect(),"
                   " s = document.getElementById('heads-strip').getBoundingClientRect();"
                   "return c.left >= s.left - 1 && c.right <= s.right + 1;")
        # ...and scrolled into the row of maps (a smooth scroll: it may take a moment on a loaded machine)
        WebDriverWait(browser, 10).until(lambda d: d.execute_script(in_view))
        seen.append(now)
    assert len({tuple(s["images"]) for s in seen}) == 6  # six different residual pictures
    browser.find_element(By.ID, "stage-prev").click()
    WebDriverWait(browser, 10).until(lambda d: _state(d)["num"] == "4 / 5")
    assert _state(browser)["images"] == seen[4]["images"]  # back to the same picture

    # screenshot: the first screen at stage 3 (the first doubling step)
    browser.execute_script("window.depthcraftStage(3); window.scrollTo(0, 0);")
    shot = tmp_path / "explore_k8.png"
    assert browser.save_screenshot(str(shot))
    width, height = _png_size(shot)
    assert width >= 800 and height >= 600
    if os.environ.get("DEPTHCRAFT_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOC_PNG)

