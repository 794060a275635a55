"""The HTML report as a colleague receives it: self-contained (no external reference), in
human words, the answer above the first fold — checked in headless Chromium (Debian's
`chromium`, installed by lab/test.sh) from a screenshot and the laid-out DOM — and charts
whose labels never cover their titles."""
import base64
import html.parser
import io
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tarn_lab import analysis, html_report, plots, report
from tarn_lab.analysis import cells_of

RUNS = Path(__file__).parent / "fixtures" / "runs"
FIXTURES = [RUNS / "quick", RUNS / "tiny-repeat"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,800", "--virtual-time-budget=5000"]
HEADLINE_GREEN = (0, 187, 85)   # .headline's color in the template (#0b5)


@pytest.fixture(params=FIXTURES, ids=lambda p: p.name)
def written(request, tmp_path) -> tuple[Path, str]:
    rundir = tmp_path / request.param.name
    shutil.copytree(request.param, rundir)
    out = html_report.write_html(rundir)
    return rundir, out.read_text()


class References(html.parser.HTMLParser):
    """Every URL-bearing attribute and tag a browser would fetch."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "poster", "data", "background") and value:
                self.urls.append(value)


def test_the_report_has_no_external_references(written):
    _, page = written
    refs = References()
    refs.feed(page)
    assert refs.urls, "the report has no images at all"
    assert all(u.startswith("data:image/png;base64,") or u.startswith("#") for u in refs.urls), refs.urls
    assert not {"script", "link", "iframe", "object", "embed"} & set(refs.tags)
    lowered = page.lower()
    for needle in ("http://", "https://", "@import", "url(", "//fonts", "file:"):
        assert needle not in lowered, needle
    # and every embedded image is a real PNG
    for u in refs.urls:
        img = Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1])))
        assert img.format == "PNG" and img.width > 300 and img.height > 200


def test_the_report_speaks_human_not_dicts(written):
    rundir, page = written
    assert "{&#34;" not in page and "{&#39;" not in page and "{'" not in page and '{"' not in page
    assert "paced disk: 500 IOPS, 8 MiB/s" in page
    # only the workloads the scenario ran are explained
    assert "sysbench&#39;s OLTP mix" in page
    assert "TPC-C" not in page and "oltp_update_index" not in page
    # detail is there, collapsed
    assert page.count("<details>") == 3 and "queries: read" in page.split("<details>", 1)[1]


def test_the_report_opens_with_the_headline_then_the_ratio_table_then_the_verdict(written):
    rundir, page = written
    scenario, runs, _ = report.load_results(rundir)
    line = analysis.headline(scenario, cells_of(scenario, runs))
    order = [page.index(s) for s in (f'<p id="headline" class="headline">{line}'.replace("'", "&#39;"),
                                     'id="ratio-1"', 'id="verdict"', "data:image/png", "<details>")]
    assert order == sorted(order)
    titles = [t for t in ("TPS per stack", "Reads per transaction", "TPS over time", "Size on disk")]
    assert all(f'alt="{t}' in page for t in titles)


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium missing: lab/test.sh installs it (apt-get install chromium)")
    return path


def in_chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    argv = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


# Test-only: the report itself has no script. This copy measures where things landed.
LAYOUT_PROBE = """<script>
window.addEventListener('load', () => {
  const box = id => { const e = document.getElementById(id); if (!e) return null;
    const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, left: b.left, right: b.right}; };
  const out = document.createElement('pre'); out.id = 'layout-probe';
  out.textContent = JSON.stringify({vw: innerWidth, vh: innerHeight,
    scroll_width: document.documentElement.scrollWidth,
    headline: box('headline'), table: box('ratio-1'), verdict: box('verdict'),
    images: [...document.images].map(i => ({w: i.naturalWidth, h: i.naturalHeight}))});
  document.body.appendChild(out);
});
</script>"""


def layout(tmp_path: Path, report_html: Path) -> dict:
    probe = tmp_path / "probe.html"
    probe.write_text(report_html.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    proc = in_chromium(tmp_path, probe.as_uri(), "--dump-dom")
    start = proc.stdout.find('<pre id="layout-probe">')
    assert start >= 0, f"chromium rendered no layout: rc={proc.returncode} {proc.stderr[-2000:]}"
    text = proc.stdout[start:].split(">", 1)[1].split("</pre>", 1)[0]
    return json.loads(html.unescape(text))


def test_in_chromium_the_headline_and_ratio_table_are_above_the_first_fold(written, tmp_path):
    rundir, _ = written
    report_html = rundir / "report.html"
    box = layout(tmp_path, report_html)
    fold = box["vh"]
    assert box["headline"]["top"] >= 0 and box["headline"]["bottom"] <= fold, box
    assert box["table"]["top"] < fold, box                     # the answer starts on the first screen
    assert box["scroll_width"] <= box["vw"], box                 # nothing wider than the window
    assert box["images"] and all(i["w"] > 0 and i["h"] > 0 for i in box["images"]), box   # every chart decoded

    shot = tmp_path / "first-screen.png"
    proc = in_chromium(tmp_path, report_html.as_uri(), f"--screenshot={shot}")
    assert shot.exists(), proc.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 800)
    # The screenshot shows the headline where the DOM says it is: its green text is there.
    h = box["headline"]
    region = img.crop((int(h["left"]), int(h["top"]), int(h["right"]), int(h["bottom"])))
    pixels = np.asarray(region, dtype=int)
    green = int((np.abs(pixels - np.array(HEADLINE_GREEN)).max(axis=2) < 40).sum())
    assert green > 500, f"no headline text in the screenshot's headline box ({green} green pixels)"


# -- charts ---------------------------------------------------------------------------------------

def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def figures_of(rundir: Path):
    scenario, runs, _ = report.load_results(rundir)
    cells = cells_of(scenario, runs)
    mine = list(cells.values())
    return [plots.tps_bars("oltp_read_write", mine, "ext4"), plots.per_txn_bars("oltp_read_write", mine),
            plots.tps_over_time("oltp_read_write", mine), plots.size_bars(mine)]


@pytest.mark.parametrize("rundir", FIXTURES, ids=lambda p: p.name)
def test_no_bar_label_covers_a_title_and_all_stay_inside_the_figure(rundir):
    for fig in figures_of(rundir):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        titles = [fig._suptitle] + [ax.title for ax in fig.axes]
        titles = [t.get_window_extent(renderer) for t in titles if t is not None and t.get_text()]
        frame = fig.bbox
        assert titles, "every chart has a title"
        for ax in fig.axes:
            for label in ax.texts:
                box = label.get_window_extent(renderer)
                assert not any(overlaps(box, t) for t in titles), (fig._suptitle.get_text(), label.get_text())
                assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1


def test_repeated_runs_get_min_max_whiskers():
    scenario, runs, _ = report.load_results(RUNS / "tiny-repeat")
    fig = plots.tps_bars("oltp_read_write", list(cells_of(scenario, runs).values()), "ext4")
    ax = fig.axes[0]
    whiskers = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert whiskers, "no error bars on a repeated run"
    _, _, (lines,) = whiskers[0].lines
    tops = sorted(max(seg[:, 1]) for seg in lines.get_segments())
    tps = sorted(max(r["summary"]["tps"] for r in runs if r["stack"] == s) for s in ("ext4", "tarn"))
    assert tops == pytest.approx(tps)
