"""The dashboard in a real browser: Debian's Chromium driven by Playwright, on a judged history with passing,
regressed (a confirmed step), drifting, incorrect, crashed and CPU-interpreter runs and a job queue
(tests/support/history.py's fill_history), served by `solci dashboard`.

Every tab of both hardware labels loads without a Streamlit exception or a JavaScript error and is
screenshotted into ``$SOLCI_SCREENSHOTS`` (default: a temporary folder); a crafted branch name is shown as
text, never as an image; a click on an Overview row shows that run's cases; a pull request's link opens its
panel and the Changes tab lists it; and on a synthetic history of
10,000 runs (scripts/bench_dashboard.py, report only) the Overview and every tab render for each visitor.
Behaviour only: how fast they render is the benchmark's to say (its targets, printed beside its figures), not
the suite's, whose machine may be a busy 2-core one.

Without Chromium or playwright the tests skip (scripts/setup_browser.sh installs Chromium; playwright comes with
the dev extras), except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import bench_dashboard as bench
from storage.db import open_database
from tests.support import PROJECT
from tests.support.history import (
    CPU,
    CRAFTED_BRANCH,
    CRASHED_RUN,
    H200,
    PR_BASE,
    PR_HEAD,
    SLOW_FROM,
    add_pull_request_run,
    commit_of,
    fill_history,
)

SCREENSHOTS_ENV = "SOLCI_SCREENSHOTS"
TABS = {  # tab label -> the container its content is in (dashboard.views)
    "Overview": "tab-overview",
    "Changes": "tab-changes",
    "History": "tab-history",
    "SOL and records": "tab-sol",
    "Runs and jobs": "tab-runs",
}
EXCEPTION = '[data-testid="stException"]'
TIMEOUT_MS = 60_000


def _browser_or_skip() -> str:
    """Chromium's path; a skip (a failure when CI=true) naming what is missing."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    chromium = bench.find_chromium()
    if chromium is None:
        missing.append("Chromium (run scripts/setup_browser.sh)")
    if missing:
        reason = "the browser tests need " + " and ".join(missing)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI=true, so they may not be skipped")
        pytest.skip(reason)
    assert chromium is not None
    return chromium


@pytest.fixture(scope="module")
def chromium() -> str:
    return _browser_or_skip()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def url(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("browser")
    db = open_database(tmp / "history.duckdb", lock_timeout=20)
    fill_history(db)
    assert add_pull_request_run(db) == "regressed"
    port = bench.free_port()
    proc = bench.serve(db.path, port, tmp / "dashboard.log")
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        bench.stop(proc)


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=bench.CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A fresh page that records JavaScript errors and every request it makes."""

    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1600, "height": 2200})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", lambda req: self.requests.append(req.url))
        self.url = url

    def open(self, **params: str) -> None:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        self.page.goto(self.url + query, wait_until="commit", timeout=TIMEOUT_MS)
        self.wait_for("Overview" if "view" not in params else params["view"])

    def wait_for(self, tab: str) -> None:
        """The tab's content is there and the script run is over."""
        self.page.wait_for_selector(f".st-key-{TABS[tab]}", state="visible", timeout=TIMEOUT_MS)
        bench.wait_idle(self.page, TIMEOUT_MS)
        self.page.wait_for_timeout(400)  # charts draw after their element exists

    def click_tab(self, tab: str) -> None:
        self.page.get_by_role("tab", name=tab, exact=True).click()
        self.wait_for(tab)

    def exceptions(self) -> list[str]:
        return self.page.locator(EXCEPTION).all_inner_texts()

    def text(self) -> str:
        return self.page.evaluate("() => document.body.innerText")

    def wait_for_text(self, *parts: str) -> str:
        """The page's text once it holds every one of ``parts`` (a TimeoutError names what never showed)."""
        for part in parts:
            self.page.wait_for_function("t => document.body.innerText.includes(t)", arg=part, timeout=TIMEOUT_MS)
        return self.text()

    def close(self) -> None:
        self.page.close()


def test_a_pull_request_s_link_opens_its_panel_and_the_changes_tab_lists_it(browser, url: str) -> None:
    """The link a pull request's comment carries (`solci report --base`): the head's verdict against its
    merge-base, above main's line; the Changes tab's table of pull requests holds the same link."""
    page = Page(browser, url)
    try:
        page.open(commit=PR_HEAD, base=PR_BASE)
        text = page.wait_for_text("Pull request run", PR_BASE[:12], "regressed")
        assert "feature" in text and not page.exceptions()
        page.click_tab("Changes")
        page.wait_for_text("Pull requests — NVIDIA H200")
        assert not page.exceptions() and not page.errors, page.errors
    finally:
        page.close()


@pytest.mark.parametrize("hardware", [H200, CPU])
def test_every_tab_renders_without_an_exception(browser, url: str, shots: Path, hardware: str) -> None:
    page = Page(browser, url)
    try:
        page.open(hardware=hardware)
        for tab in TABS:
            if tab != "Overview":
                page.click_tab(tab)
            container = page.page.locator(f".st-key-{TABS[tab]}")
            assert container.inner_text().strip(), f"{tab}: nothing rendered"
            found = page.exceptions()
            assert not found, f"{hardware} / {tab}: Streamlit exception: {found[0][:2000]}"
            for word in ("Traceback", "Error", "Exception"):
                assert not any(word in t for t in found)
            assert "Oh no." not in page.text() and "Connection error" not in page.text()
            slug = f"{'h200' if hardware == H200 else 'cpu'}_{tab.lower().replace(' ', '_')}.png"
            page.page.screenshot(path=str(shots / slug))
        assert not page.errors, f"JavaScript errors: {page.errors}"
        if hardware == H200:
            charts = page.page.locator(".st-key-tab-runs .js-plotly-plot")
            assert charts.count() >= 1  # the crashed run's samples chart is drawn, not a crash
    finally:
        page.close()


def test_the_headline_is_the_latest_passing_run(browser, url: str) -> None:
    page = Page(browser, url)
    try:
        page.open()
        page.wait_for_text("SOL score", "Kernel ÷ cuBLAS time", "lower is better")
        page.wait_for_text("did not pass", "SyntaxError: invalid syntax")  # the crashed newest run is named
        metric = page.page.locator('[data-testid="stMetric"]').filter(has_text="SOL score").first.inner_text()
        assert "%" in metric and "0.0%" not in metric
    finally:
        page.close()


def test_stored_strings_are_shown_as_text(browser, url: str) -> None:
    """Issue 9: a branch named like a Markdown image and an HTML tag is shown literally; no <img> is created and
    nothing is fetched from the address it names."""
    page = Page(browser, url)
    try:
        page.open()  # the headline's run is the newest passing one: the run on the crafted branch
        page.wait_for_text(CRAFTED_BRANCH)
        sources = page.page.eval_on_selector_all("img", "els => els.map(e => e.getAttribute('src') || '')")
        assert not [s for s in sources if "127.0.0.1:9" in s or s == "x"], sources
        assert not [r for r in page.requests if "127.0.0.1:9" in r]
        links = page.page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href') || '')")
        assert not [h for h in links if "127.0.0.1" in h], links  # not made a link either
    finally:
        page.close()


def test_a_click_on_an_overview_row_shows_its_cases(browser, url: str) -> None:
    page = Page(browser, url)
    try:
        page.open()
        grid = page.page.locator('.st-key-tab-overview [data-testid="stDataFrame"]').first
        box = grid.bounding_box()
        assert box is not None
        row = CRASHED_RUN - SLOW_FROM  # newest first: the crashed run is row 0
        header, height = 35, 35  # dashboard rows (st.dataframe's default row height)
        page.page.mouse.click(box["x"] + 16, box["y"] + header + row * height + height / 2)
        page.page.wait_for_function(
            f"() => document.body.innerText.includes('Run {commit_of(SLOW_FROM)}') "
            "&& document.body.innerText.includes('(selected)')",
            timeout=TIMEOUT_MS,
        )
        bench.wait_idle(page.page)
        text = page.text()
        assert "verdict regressed" in text and "Cases of this run" in text
        assert not page.exceptions()
    finally:
        page.close()


def test_render_benchmark_at_10000_runs(chromium: str, tmp_path: Path, shots: Path) -> None:
    """scripts/bench_dashboard.py on a history of 10,000 runs, report only (``--no-check``): each visitor's page
    shows the Overview table and then every tab's content (the benchmark waits for each, and fails when one never
    comes), and the figures are printed beside their targets. No figure is compared with its target here."""
    bench_shots = tmp_path / "bench-shots"
    proc = subprocess.run(
        [
            sys.executable,
            str(PROJECT / "scripts" / "bench_dashboard.py"),
            "--runs",
            "10000",
            "--rounds",
            "1",
            "--no-check",
            "--screenshots",
            str(bench_shots),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(PROJECT), "SOLCI_CHROMIUM": chromium},
    )
    print(proc.stdout)
    assert "first render" in proc.stdout and "tab switch to History" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10,000 runs" in proc.stdout, proc.stdout
    first = next(line for line in proc.stdout.splitlines() if line.startswith("first render"))
    assert f"<{bench.FIRST_RENDER_TARGET_S:g} s" in first, first  # the target is printed beside the figure
    for tab in TABS:
        if tab != "Overview":
            assert f"tab switch to {tab}" in proc.stdout, proc.stdout
        shot = bench_shots / f"bench_{tab.lower().replace(' ', '_')}.png"
        assert shot.stat().st_size > 0, f"{tab}: no screenshot of its rendered content"
        shutil.copy(shot, shots / shot.name)
