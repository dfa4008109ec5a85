"""The report's index.html in a real browser (headless Chromium): it loads without console errors, nothing is
wider than the window, its figures are there and decode, and the long lists are collapsed so the page stays
short. Skipped where no Chromium is installed."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.peers import PEERS
from compat_tests.tests.helpers import TINY_GRID as TINY
from compat_tests.tests.helpers import Perturbed

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
                if shutil.which(name)), None)


pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) installed")


# Injected into a test-only copy of the page: after the load event, the layout facts as JSON in <pre id=probe>,
# measured once as the page opens (its <details> closed) and once with every <details> open.
PROBE = """<script>
window.addEventListener('load', () => {
  const vw = document.documentElement.clientWidth;
  const wide = () => [...document.body.querySelectorAll('*')].filter(el => {
      const r = el.getBoundingClientRect(); return r.width > 0 && r.right > vw + 1; })
    .slice(0, 10).map(el => el.tagName + (el.className ? '.' + el.className : '') + ' ' +
                          Math.round(el.getBoundingClientRect().right) + ': ' + (el.textContent || '').slice(0, 60));
  const facts = {viewport: vw, scrollWidth: document.documentElement.scrollWidth,
                 height: document.documentElement.scrollHeight, wide: wide(),
                 images: [...document.images].map(i => ({alt: i.alt, natural: i.naturalWidth, shown: i.width,
                                                         right: Math.round(i.getBoundingClientRect().right)})),
                 headings: [...document.querySelectorAll('h2')].map(h => h.textContent)};
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  facts.openScrollWidth = document.documentElement.scrollWidth;
  facts.openHeight = document.documentElement.scrollHeight;
  facts.openWide = wide();
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(facts);
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                           "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr",
                           "--v=0", *args], capture_output=True, text=True, timeout=180)


def probe(page: Path, tmp: Path, width: int = 1400, height: int = 900) -> tuple[dict, list[str]]:
    """The layout facts of ``page`` at ``width`` x ``height`` and the console messages it logged."""
    copy = tmp / f"probe-{width}.html"
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    done = _chromium(tmp, f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom",
                     copy.as_uri())
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", done.stdout, re.S)
    assert found, f"no probe in the page Chromium dumped: {done.stderr[-2000:]}"
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return json.loads(html.unescape(found.group(1))), console


def screenshot(page: Path, png: Path, tmp: Path, width: int = 1400, height: int = 900) -> Path:
    """What a reader sees of ``page`` in a ``width`` x ``height`` window."""
    done = _chromium(tmp, f"--window-size={width},{height}", "--virtual-time-budget=10000", f"--screenshot={png}",
                     page.as_uri())
    assert png.exists(), done.stderr[-2000:]
    return png


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The tiny grid's report with a failing backend: failures, closest calls, every figure, long commands."""
    out = tmp_path_factory.mktemp("page")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(PEERS, "perturbed", Perturbed())
        assert cli.main(["report", "--grid", str(TINY), "--backends", "reference,torch-cpu,perturbed", "--out",
                         str(out), "--jobs", "1", "--no-progress"]) == 1
    return out


@pytest.mark.parametrize("width", [1400, 1024])
def test_the_page_fits_the_window_without_console_errors(page, tmp_path, width):
    facts, console = probe(page / "index.html", tmp_path, width)
    assert not console, console
    assert facts["viewport"] <= width
    assert facts["scrollWidth"] <= facts["viewport"] and not facts["wide"], facts["wide"]
    assert facts["openScrollWidth"] <= facts["viewport"] and not facts["openWide"], facts["openWide"]
    images = {i["alt"]: i for i in facts["images"]}
    assert set(images) == {"heatmaps", "drift", "gru_variant", "amplification"}
    assert all(i["natural"] > 0 and 0 < i["right"] <= facts["viewport"] for i in images.values()), images
    assert facts["height"] < 15000, facts["height"]


def test_failures_and_closest_calls_lead_and_the_long_lists_are_collapsed(page, tmp_path):
    facts, _ = probe(page / "index.html", tmp_path)
    report = json.loads((page / "report.json").read_text())
    failed = sum(not w["passed"] for w in report["worst"])
    assert failed > 0
    headings = facts["headings"]
    assert headings[:3] == ["Summary", f"Failures ({failed})", "Closest calls"], headings
    assert headings[-1] == "Every comparison"
    assert facts["openHeight"] > facts["height"], "every comparison and the unrun configs are collapsed"
    text = (page / "index.html").read_text()
    failures = text.split("<a id='failures'></a>")[1].split("<a id='closest'></a>")[0]
    assert all(html.escape(w["reproduce"], quote=False) in failures for w in report["worst"] if not w["passed"])
    assert not re.search(r"\b(PASS|FAIL|ok)\b", re.sub(r"<[^>]+>", " ", text).split("Every comparison")[0]), \
        "one vocabulary: passed, failed, indeterminate"


def test_the_markdown_keeps_to_the_summary_failures_closest_calls_and_grouped_reasons(page):
    md = (page / "report.md").read_text()
    report = json.loads((page / "report.json").read_text())
    failed = sum(not w["passed"] for w in report["worst"])
    assert [line for line in md.splitlines() if line.startswith("## ")][:4] == [
        "## Summary", "## Worst share of the budget per mode", f"## Failures ({failed})", "## Closest calls"]
    assert "report.json (`records`" in md and "results.jsonl" in md
    assert len(md.splitlines()) < 200 + failed * 2


def test_a_run_without_failures_says_so(tmp_path):
    """The worst-case list of a passing run holds passes only: the page must say nothing failed."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "dtype": "float32", "seq_len": 3,
                                                               "seed": k}} for k in range(2)]))
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 0
    text = (out / "index.html").read_text()
    assert "<h2>Failures (0)</h2>\n<p class='passed'>No comparison failed.</p>" in text
    assert "## Failures (0)\n\nNo comparison failed." in (out / "report.md").read_text()
    facts, console = probe(out / "index.html", tmp_path)
    assert not console and not facts["wide"] and facts["images"], facts
