"""The app in a real browser: `tripath app` serves app.py headless, Playwright drives Debian's Chromium.

Loads the app, runs the explorer page's default scenario (data/scenarios/quickstart-gpu.toml), waits for the
results table and a plot, checks the counts shown, opens the calibration page, uploads a malformed profile through the
file input (refused, nothing changed), and saves a screenshot (to a tmp path;
TRIPATH_APP_SCREENSHOT=PATH also writes one there, e.g. docs/img/app.png). Playwright's own
browser downloads are never used: the system Chromium is passed as executable_path.

``test_every_page_answers_on_its_defaults`` clicks through every page but Recommendation (tested on its own below) in
one session, runs each on its defaults without touching an input, and checks that it answers (a recommendation,
a plan with replica counts, a sweep whose points differ, tables) and shows no "None", "NaN" or "nan", no empty
table cell (st.dataframe draws a missing value as the word "None" on its canvas; the grid's accessible copy in
the page holds an empty cell there) and no negative latency.

No browser means a failure with the fix in the message, not a silent pass; only an explicit
TRIPATH_SKIP_BROWSER=1 skips (what `make test` sets, with a warning, on a machine where
scripts/ensure_chromium.sh could not install Chromium).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import shipped_scenario_dict
from tests.timing import slack
from tripath.app.widgets import state
from tripath.core.data_dirs import REPO_ROOT

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Hang guards (tests/timing.py): x3 on a quiet machine, more on a busy one; a run takes ~1 s of CPU
START_TIMEOUT_S = slack(30)
STEP_TIMEOUT_MS = slack(30) * 1000


def _chromium() -> str:
    found = next((p for p in CHROMIUM_CANDIDATES if os.access(p, os.X_OK)), None) or shutil.which("chromium")
    if found:
        return found
    if os.environ.get("TRIPATH_SKIP_BROWSER") == "1":
        pytest.skip("TRIPATH_SKIP_BROWSER=1: real-browser test skipped on request")
    pytest.fail("no Chromium found at /usr/bin/chromium: install Debian's package (`apt-get install -y chromium`, "
                "make test does this where it can: scripts/ensure_chromium.sh) or set TRIPATH_SKIP_BROWSER=1 to "
                "skip it")


@contextlib.contextmanager
def _browser() -> Iterator[tuple[Any, Any]]:
    """(Chromium launched headless from the system's binary, Playwright's ``expect``), closed on the way out."""
    chromium = _chromium()
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:  # a test dependency: missing means a broken install, never a skip
        pytest.fail("the playwright package is missing: pip install -e '.[test]'")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield browser, expect
        finally:
            browser.close()


def _default_requests() -> int:
    return int(shipped_scenario_dict(state.DEFAULT_SCENARIO)["workload"]["requests"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the app server exited with {server.returncode}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the app server did not answer within {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory):
    """One `tripath app` server for the module's tests (each test opens its own browser sessions)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "w") as out:
        # `tripath app` execs `streamlit run app.py --server.headless true --server.port PORT`: same pid
        server = subprocess.Popen([sys.executable, "-m", "tripath.cli.main", "app", "--port", str(port),
                                   "--address", "127.0.0.1"], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)


def _screenshot(page: Any, heading: str, shot: Path, env: str) -> None:
    """The viewport with ``heading`` at its top, saved to ``shot`` (and to $``env`` when set: a docs picture)."""
    page.get_by_role("heading", name=heading).evaluate("h => h.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 10_000
    if os.environ.get(env):
        page.screenshot(path=os.environ[env], full_page=False)


@pytest.mark.slow  # 71 s on a loaded 2-core machine
def test_quickstart_in_a_real_browser(app_url: str, tmp_path: Path) -> None:
    with _browser() as (browser, expect):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        expect.set_options(timeout=STEP_TIMEOUT_MS)
        page.goto(f"{app_url}/explorer")  # the first page is the recommendation (its own test below)
        expect(page.get_by_role("heading", name="Scenario explorer")).to_be_visible()
        expect(page.get_by_role("button", name="Deploy")).to_have_count(0)  # the minimal toolbar (tripath app)
        page.get_by_role("button", name="Run simulation").click()
        # the results: percentile table, metrics (the default scenario's requests x the default 3
        # replications), a plot
        expect(page.get_by_role("heading", name="Results")).to_be_visible()
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()
        image = page.locator("[data-testid='stImage'] img, [data-testid='stImageContainer'] img").first
        expect(image).to_be_visible()
        assert image.evaluate("img => img.naturalWidth") > 100  # a decoded figure, not a broken image
        arrived = page.locator("[data-testid='stMetric']").filter(has=page.get_by_text("arrived", exact=True))
        expect(arrived.locator("[data-testid='stMetricValue']")).to_have_text(f"{_default_requests() * 3:,}")
        expect(page.locator("[data-testid='stException']")).to_have_count(0)
        # the results at the top of the viewport: the metrics, the table and the CDFs in one picture
        _screenshot(page, "Results", tmp_path / "app.png", "TRIPATH_APP_SCREENSHOT")
        page.get_by_role("link", name="Calibration").click()
        expect(page.get_by_role("heading", name="Calibration")).to_be_visible()
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()
        # a malformed upload through the browser's file input: refused, with the parser's message
        bad = tmp_path / "broken.json"
        bad.write_text('{"schema_version": 1, "key": ')
        page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(str(bad))
        expect(page.locator("[data-testid='stAlert']").filter(has_text="nothing changed")).to_be_visible()
        expect(page.locator("[data-testid='stException']")).to_have_count(0)


@pytest.mark.slow  # minutes: a cold recommendation
def test_recommendation_page_in_a_real_browser(app_url: str, tmp_path: Path) -> None:
    """The first page end to end on a quick case (one layout, 2 replications, verdicts over 1,000 requests, up to
    2 replicas): choose them, Run, read the answer; it is recommend()'s for those inputs, with its GPU, its
    headroom, the vLLM and SGLang commands, and no None, NaN or negative latency on screen.

    The expected answer is computed first with planning's on-disk cache in the repository (the one the app
    server uses), so the page's run reads the same simulations when, and only when, its inputs are the same (the
    default's own inputs take minutes cold: docs/planning.md). TRIPATH_RECOMMENDATION_SCREENSHOT=PATH also saves
    the answer's screenshot there (docs/img/recommendation.png).
    """
    from tripath.app.widgets import recommend_form as form
    from tripath.planning import recommend_text as render
    from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
    from tripath.planning.decision import DecisionRule
    from tripath.planning.executor import make_executor
    from tripath.planning.prices import load_prices
    from tripath.planning.recommend import SearchOptions, recommend
    from tripath.planning.scenario_dict import load_scenario_dict

    profile, replications, budget, max_replicas = "published-llama3-8b-a100", 2, 1000, 2
    base, source = load_scenario_dict("default")
    start = form.defaults(base)
    choices = form.Choices(profile, start["workload"], start["qps"], start["ttft_s"], start["tpot_ms"],
                           start["requests"])
    options = SearchOptions(seed=0, rule=DecisionRule(replications, budget), max_replicas=max_replicas)
    rec = recommend(form.scenario(base, choices), source, [profile], choices.qps, load_prices(), options,
                    make_executor("local"), ResultCache(REPO_ROOT / DEFAULT_CACHE_DIR)).to_dict()
    best, runner = rec["recommended"], rec["runner_up"]
    assert best is not None, "the quick case has a recommendation (tripath recommend)"
    with _browser() as (browser, expect):
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        expect.set_options(timeout=STEP_TIMEOUT_MS)
        page.goto(app_url)
        expect(page.get_by_role("heading", name="Recommendation")).to_be_visible()
        chooser = page.get_by_role("combobox").first  # "model and GPU (profile)", the page's first input
        chooser.click()
        page.keyboard.type(profile)
        # click the filtered option itself (Enter could pick whatever the list showed before the filter caught up)
        page.get_by_role("option").filter(has_text=f"[{profile}]").first.click()
        expect(chooser).to_have_value(re.compile(re.escape(f"[{profile}]") + "$"))  # the choice is the input's value
        page.get_by_text("simulation settings").first.click()
        for label, value in (("replications", replications), ("most requests per replication", budget),
                             ("search up to replicas", max_replicas)):
            box = page.get_by_role("spinbutton", name=label)
            box.fill(str(value))
            box.press("Enter")
            expect(box).to_have_value(str(value))
        page.get_by_role("button", name="Run", exact=True).click()
        answer = page.locator("[data-testid='stAlert']").filter(has_text="Recommended:")
        expect(answer).to_be_visible(timeout=ANSWER_TIMEOUT_MS)
        layout = best["layout"]
        # the renderer's sentence, `tripath recommend`'s own line (tripath/planning/recommend_text.py)
        expect(answer).to_contain_text(render.strip_markdown(render.headline(rec, max_replicas, True)[0].text))
        expect(answer).to_contain_text(
            f"Recommended: {best['candidate']} on {layout['gpu']} TP{layout['tp']} ({profile}, max batch "
            f"{best['max_batch_size']}): {best['replicas']} replica(s) x "
            f"{best['gpus_per_replica']} GPU(s) = {best['gpus']} GPU(s), ${best['cost_usd_per_hour']:,.2f}/h")
        metrics = page.locator("[data-testid='stMetric']")
        for label, value in (("path", best["candidate"]), ("GPU", f"{layout['gpu']} TP{layout['tp']}"),
                             ("replicas", str(best["replicas"])), ("GPUs", str(best["gpus"])),
                             ("cost (USD per hour)", f"{best['cost_usd_per_hour']:,.2f}")):
            metric = metrics.filter(has=page.get_by_text(label, exact=True))
            expect(metric.locator("[data-testid='stMetricValue']")).to_have_text(value)
        if runner is not None:
            expect(page.get_by_text(f"Runner-up: {runner['candidate']}")).to_be_visible()
        expect(page.get_by_text("Headroom:").first).to_be_visible()
        expect(page.get_by_text("vllm serve", exact=False).first).to_be_attached()
        expect(page.get_by_text("sglang.launch_server", exact=False).first).to_be_attached()
        image = page.locator("[data-testid='stImage'] img, [data-testid='stImageContainer'] img").first
        expect(image).to_be_visible()
        assert image.evaluate("img => img.naturalWidth") > 100  # the Pareto plot, decoded
        expect(page.locator("[data-testid='stException']")).to_have_count(0)
        page.wait_for_timeout(300)
        assert not _problems(page), _problems(page)
        _screenshot(page, "Answer", tmp_path / "recommendation.png", "TRIPATH_RECOMMENDATION_SCREENSHOT")


RAW = re.compile(r"\b(None|NaN|nan)\b")
NEGATIVE_MS = re.compile(r"(?<![\w.])[-\u2212]\s?\d[\d,]*(\.\d+)?\s?ms\b")  # "-12 ms", "−1,234.5 ms"
NEGATIVE_NUMBER = re.compile(r"^[-\u2212]\s?\d")
# page title (its heading and its link in the sidebar), the button that runs it on its defaults (None: it answers
# on opening), and what its answer shows: "metric:LABEL" (a metric whose value is an answer, not "none meets" or
# "—") or "COLUMN:WORD|WORD" (the table with that column holds a cell with each word)
PAGES = (
    ("Scenario explorer", "Run simulation", "metric:TTFT P99"),
    ("Decision matrix", "Build the matrix", "metric:recommended"),
    ("Capacity planner", "Plan capacity", "metric:recommended (fewest GPUs meeting the SLA)"),
    ("SLA what-if", "Run the sweep", "load (req/s):meets|misses"),  # points that differ: some meet, some miss
    ("Calibration", None, "from measured kernel rows:prefill_table_v1"),
    ("Fidelity", None, "worst quantity:compared"),
)
ANSWER_TIMEOUT_MS = slack(80) * 1000  # a cold matrix or capacity plan: ~25 s on a quiet 2-core machine


def _problems(page: Any) -> list[str]:
    """What the page shows that it must not: raw None/NaN, empty table cells, negative latencies or numbers."""
    found = []
    text = page.locator("[data-testid='stMain']").inner_text()
    found += [f"text {m.group(0)!r} near {text[max(0, m.start() - 60):m.end() + 20]!r}" for m in RAW.finditer(text)]
    found += [f"negative latency {m.group(0)!r}" for m in NEGATIVE_MS.finditer(text)]
    for table in page.locator("[data-testid='stDataFrame']").all():
        cells = table.locator("[role='gridcell']").all_text_contents()
        found += [f"table cell {c!r}" for c in cells if not c.strip() or RAW.search(c) or NEGATIVE_NUMBER.match(c)
                  or NEGATIVE_MS.search(c)]
    return found


@pytest.mark.slow  # 145 s on a loaded 2-core machine
def test_every_page_answers_on_its_defaults(app_url: str) -> None:
    """Every page but Recommendation, as a user clicks through them in one session: each starts on the same shared
    profile and scenario (tripath/app/widgets/state.py), so each is on its own defaults; its button pressed without
    touching an input, it answers, with no raw None/NaN, empty table cell or negative latency on screen."""
    failures: dict[str, list[str]] = {}
    with _browser() as (browser, expect):
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        expect.set_options(timeout=STEP_TIMEOUT_MS)
        page.goto(f"{app_url}/explorer")
        for title, button, answer in PAGES:
            started = time.monotonic()
            page.locator("[data-testid='stSidebarNav']").get_by_role("link", name=title).click()
            expect(page.get_by_role("heading", name=title)).to_be_visible()
            if button is not None:
                page.get_by_role("button", name=button).click()
            kind, _, what = answer.partition(":")
            if kind == "metric":
                metric = page.locator("[data-testid='stMetric']").filter(has=page.get_by_text(what, exact=True))
                value = metric.locator("[data-testid='stMetricValue']")
                expect(value).to_be_visible(timeout=ANSWER_TIMEOUT_MS)
                shown = value.inner_text()
                if shown.startswith("none meets") or shown.startswith("\u2014"):
                    failures.setdefault(title, []).append(f"no answer: {what} = {shown!r}")
            else:
                table = page.locator("[data-testid='stDataFrame']").filter(
                    has=page.locator("th[role='columnheader']", has_text=kind))
                cells = table.locator("[role='gridcell']")
                for word in what.split("|"):
                    expect(cells.filter(has_text=word).first).to_be_attached(timeout=ANSWER_TIMEOUT_MS)
            expect(page.locator("[data-testid='stException']")).to_have_count(0)
            expect(page.locator("[data-testid='stStatusWidget']")).to_have_count(0)  # the run has ended
            page.wait_for_timeout(300)  # the last tables drawn
            failures.setdefault(title, []).extend(_problems(page))
            print(f"{title}: answered in {time.monotonic() - started:.1f} s")
    failures = {title: found for title, found in failures.items() if found}
    assert not failures, failures


def test_a_long_run_shows_progress_and_can_be_stopped(app_url: str) -> None:
    """The decision matrix with the result cache off (every simulation runs): the bar counts simulations done out
    of the total, Stop ends the run, and the page says so and shows no half-built matrix."""
    with _browser() as (browser, expect):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(STEP_TIMEOUT_MS)
        expect.set_options(timeout=STEP_TIMEOUT_MS)
        page.goto(f"{app_url}/matrix")
        expect(page.get_by_role("heading", name="Decision matrix")).to_be_visible()
        page.get_by_text("sweep options").click()
        cache = page.get_by_role("checkbox", name="use the result cache")
        cache.uncheck(force=True)
        expect(cache).not_to_be_checked()
        page.get_by_role("button", name="Build the matrix").click()
        expect(page.get_by_text(re.compile(r"decision matrix: [1-9]\d*/\d+ simulations done"))).to_be_visible()
        page.get_by_role("button", name="Stop", exact=True).click()
        expect(page.locator("[data-testid='stAlert']").filter(has_text="Stopped")).to_be_visible()
        expect(page.get_by_text("Best candidate per cell")).to_have_count(0)
        expect(page.get_by_role("button", name="Stop", exact=True)).to_have_count(0)
        expect(page.locator("[data-testid='stException']")).to_have_count(0)
