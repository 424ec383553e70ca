"""The HTML report opened in real headless Chromium: it renders, its scripts run without console
errors, the plots load, sorting and filtering work, and a screenshot is a real picture.

``SLUICE_UPDATE_GOLDEN=1`` also refreshes the screenshot in ``docs/img/report.png``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fixture_run import build_fixture_run

from reports.contamination import render_report

CHROMIUM = os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOC_SHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "report.png"

pytestmark = pytest.mark.skipif(
    not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)),
    reason=f"chromium not found at {CHROMIUM} (install it with scripts/setup.sh or set SLUICE_CHROMIUM)",
)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory, benchmarks_dir, pools_dir) -> Path:
    base = tmp_path_factory.mktemp("chromium")
    run = build_fixture_run(base / "run", benchmarks_dir, pools_dir)
    return render_report(run, base / "report").html


def test_report_is_self_contained(report_html):
    html = report_html.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), (
        "the report must not load anything"
    )
    assert "<style>" in html and "<script>" in html
    assert html.count('src="data:image/png;base64,') == 3


def test_screenshot_is_a_real_picture(report_html, tmp_path):
    from PIL import Image

    png = tmp_path / "report.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1400,2000",
            "--hide-scrollbars",
            report_html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert png.is_file(), (
        f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    )
    with Image.open(png) as im:
        assert im.size == (1400, 2000)
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200, "the screenshot is (nearly) blank"


def _doc_screenshot(page, tmp_path: Path) -> None:
    """docs/img/report.png: summary and evidence (provenance folded away for the picture),
    8-bit palette to keep the committed file small."""
    from PIL import Image

    page.reload()  # default order, no filters
    page.add_style_tag(content="#provenance { display: none }")
    shot = tmp_path / "doc.png"
    page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 1400, "height": 1700})
    DOC_SHOT.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(shot) as im:
        im.convert("RGB").quantize(colors=256).save(DOC_SHOT, optimize=True)


def test_page_renders_and_scripts_work(report_html, tmp_path):
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="python package playwright not installed"
    )
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        # playwright gives the browser its own temporary profile (--user-data-dir is not allowed here)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.goto(report_html.as_uri())
            page.wait_for_load_state("load")

            assert page.title() == "Contamination report: fixture_pool"
            for tid in (
                "by-benchmark",
                "by-detector",
                "by-source",
                "benchmarks",
                "detectors",
                "evidence-table",
                "agreement-table",
            ):
                assert page.locator(f"table#{tid}").count() == 1, tid
            plots = page.eval_on_selector_all(
                "img.plot", "els => els.map(e => [e.id, e.complete && e.naturalWidth])"
            )
            assert len(plots) == 3 and all(w and w > 100 for _, w in plots), plots
            assert page.locator("#evidence-table mark").count() >= 5  # highlighted overlaps

            rows = page.locator("#evidence-table tbody tr")
            assert rows.count() == 6
            assert page.inner_text("#ev-count") == "6 of 6 shown"

            def first_uid() -> str:
                return page.inner_text("#evidence-table tbody tr:first-child .uid")

            page.click("#evidence-table th:nth-child(2)")  # training row, ascending
            assert first_uid() == "ttrl-0"
            page.click("#evidence-table th:nth-child(2)")  # descending
            assert first_uid() == "ttrl-8-half"

            page.fill("#ev-filter", "2024-I-5")
            assert page.inner_text("#ev-count") == "1 of 6 shown"
            page.fill("#ev-filter", "")
            page.select_option("#ev-detector", "minhash")
            assert page.inner_text("#ev-count") == "5 of 6 shown"
            assert not page.locator(
                "#evidence-table tbody tr:visible .uid", has_text="ttrl-8-half"
            ).count()
            page.select_option("#ev-detector", "")
            page.select_option("#ev-benchmark", "aime24")
            assert page.inner_text("#ev-count") == "6 of 6 shown"
            if os.environ.get("SLUICE_UPDATE_GOLDEN") == "1":
                _doc_screenshot(page, tmp_path)
        finally:
            browser.close()
    assert not problems, problems


@contextlib.contextmanager
def _opened_report(tmp_path: Path, benchmarks_dir, pools_dir, **fixture):
    """The report of a fixture run (``build_fixture_run`` options) open in a Chromium page."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="python package playwright not installed"
    )
    run = build_fixture_run(tmp_path / "run", benchmarks_dir, pools_dir, **fixture)
    html = render_report(run, tmp_path / "report").html
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            yield page
        finally:
            browser.close()


def test_removed_only_filter_hides_the_kept_pairs(benchmarks_dir, pools_dir, tmp_path):
    """With n-grams evidence only, the half copy is a flagged pair that is kept: 'removed only'
    hides exactly it (in the main fixture every pair is removed, so the box changed nothing)."""
    with _opened_report(tmp_path, benchmarks_dir, pools_dir, evidence_only=["ngram"]) as page:
        assert page.inner_text("#ev-count") == "6 of 6 shown"
        page.check("#ev-removed")
        assert page.inner_text("#ev-count") == "5 of 6 shown"
        visible = page.locator("#evidence-table tbody tr:visible .uid").all_inner_texts()
        assert len(visible) == 5 and "ttrl-8-half" not in visible
        page.uncheck("#ev-removed")
        assert page.inner_text("#ev-count") == "6 of 6 shown"


def test_benchmark_filter_and_numeric_sort_on_two_benchmarks(benchmarks_dir, pools_dir, tmp_path):
    """Twelve pairs over aime24 and aime25 (fixture variant "c"): the benchmark filter shows one
    benchmark's pairs only, and the "#" column sorts as numbers (with one benchmark and six
    rows, a filter that hid nothing and a sort by text passed)."""
    with _opened_report(tmp_path, benchmarks_dir, pools_dir, variant="c") as page:
        assert page.inner_text("#ev-count") == "12 of 12 shown"

        def visible(cell: str) -> list[str]:
            return page.locator(
                f"#evidence-table tbody tr:visible td:nth-child({cell})"
            ).all_inner_texts()

        for bench, prefix in (("aime25", "aime25-copy-"), ("aime24", "ttrl-")):
            page.select_option("#ev-benchmark", bench)
            assert page.inner_text("#ev-count") == "6 of 12 shown"
            uids = page.locator("#evidence-table tbody tr:visible .uid").all_inner_texts()
            assert len(uids) == 6 and all(u.startswith(prefix) for u in uids), uids
        page.select_option("#ev-benchmark", "")
        assert page.inner_text("#ev-count") == "12 of 12 shown"

        page.click("#evidence-table th:nth-child(1)")  # "#", ascending
        assert visible("1") == [str(i) for i in range(1, 13)]
        page.click("#evidence-table th:nth-child(1)")  # descending: 12 first, not 9
        assert visible("1") == [str(i) for i in range(12, 0, -1)]
