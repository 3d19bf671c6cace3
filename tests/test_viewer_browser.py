"""The trace viewer in headless Chromium (Debian's `chromium` driven by Playwright): a repaired, a bounced
and a surrendered request, clicked through, each telling its story; screenshots go to tests/artifacts/.

Skips when chromium or the playwright package is missing (`apt-get install chromium`, `pip install
playwright`; never `playwright install`: the system browser is used)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.trace_scenarios import bounced, repaired, surrendered

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def page() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        yield tab
        browser.close()
        assert errors == [], errors


def test_viewer_tells_a_repaired_a_bounced_and_a_surrendered_request_apart(page, proxy, fake):
    ARTIFACTS.mkdir(exist_ok=True)
    repaired(fake[0], proxy)
    bounced(fake[0], proxy)
    surrendered(fake[0], proxy)
    page.goto(proxy + "/sanctum/")
    rows = page.locator("#rows tr")
    rows.nth(2).wait_for()
    assert rows.locator(".badge").all_inner_texts() == ["surrendered", "corrected", "repaired"]
    assert "1 mended" in rows.nth(2).inner_text() and "cast get_weather" in rows.nth(2).inner_text()

    rows.nth(2).click()
    mended = page.locator("#detail .card.mended")
    mended.wait_for()
    assert "trailing comma" in mended.inner_text()
    assert '"days": 3,}' in mended.locator(".pane.before").inner_text()
    assert '"days": 3\n' in mended.locator(".pane.after").inner_text()
    assert "get_weather" in page.locator("#detail .card.cast").inner_text()
    facts = page.locator("#detail dl.facts").inner_text()
    assert "Trace id" in facts and "native" in facts and "object" not in facts
    page.screenshot(path=str(ARTIFACTS / "viewer_repaired.png"))

    rows.nth(1).click()
    corrected = page.locator("#detail .card.corrected")
    corrected.wait_for()
    text = corrected.inner_text()
    assert "unknown tool" in text
    assert corrected.locator(".pane.before pre").inner_text() == 'lookup_weather({"city": "Paris"})'
    assert "get_weather" in corrected.locator(".pane.note").inner_text()
    assert 'get_weather({"city": "Paris"})' in corrected.locator(".pane.after").inner_text()
    assert "corrected once" in page.locator("#detail .story").inner_text()
    page.screenshot(path=str(ARTIFACTS / "viewer_corrected.png"))
    second_round = page.locator("#detail details.round").nth(1)
    second_round.locator("summary").click()
    sent = second_round.locator(".pane.sent pre").inner_text()
    assert "[user] Weather in Paris?" in sent and "[user] There is no tool named 'lookup_weather'" in sent
    assert "(answer schema)" not in second_round.locator("summary").inner_text()  # asked without a grammar
    second_round.screenshot(path=str(ARTIFACTS / "viewer_corrected_round2.png"))

    rows.nth(0).click()
    gave_up = page.locator("#detail .card.surrendered")
    gave_up.wait_for()
    assert gave_up.locator("ol.rejected li").count() == 3
    assert "gave up" in page.locator("#detail .story").inner_text()
    page.screenshot(path=str(ARTIFACTS / "viewer_surrendered.png"))

    page.select_option("select[name=outcome]", "repaired")
    # Not page.wait_for_function("..."): a string predicate is eval'd in the page, which its CSP forbids.
    rows.nth(1).wait_for(state="detached")
    rows.nth(0).wait_for()
    assert rows.locator(".badge").all_inner_texts() == ["repaired"]


def test_viewer_marks_a_constrained_correction_round(page, proxy, fake):
    bounced(fake[0], proxy, **{"X-Sanctum-Constrain": "repair"})  # the default: the correction is constrained
    page.goto(proxy + "/sanctum/")
    page.locator("#rows tr").nth(0).click()
    second_round = page.locator("#detail details.round").nth(1)
    second_round.wait_for()
    assert "(answer schema)" in second_round.locator("summary").inner_text()
    second_round.locator("summary").click()
    sent = second_round.locator(".pane.sent pre").inner_text()
    # the correction is in the transcript on every upstream (docs/contract.md section 5), and the round is constrained
    assert "[user] Weather in Paris?" in sent and "[user] There is no tool named 'lookup_weather'" in sent


def test_viewer_asks_for_the_key_when_the_traces_need_one(page, make_proxy, fake):
    url = make_proxy(api_keys=["sk-good"], admin_key="sk-admin")
    repaired(fake[0], url, authorization="Bearer sk-good")
    page.goto(url + "/sanctum/")
    page.locator("#key").wait_for()
    page.fill("#key input[name=key]", "sk-admin")
    page.click("#key button")
    page.locator("#rows tr").first.wait_for()
    assert page.locator("#rows .badge").all_inner_texts() == ["repaired"]
