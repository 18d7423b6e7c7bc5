"""Charts that cannot mislead (issue 29, item 6), read off the rendered pages in headless
Chromium: the partial last slice ends where the run did (and its drain is shaded), a chart
with too little data is a sentence (a one-slice run's panel grew to 33 million pixels),
counts and rates start at 0, a single point is visible, one colour per event type on every
page, a failed expectation is readable text (not ``"\\u003e=1"``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.browser import chromium_missing, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd, saved_load_run

from duplexctl.report.html import charts

pytestmark = [
    pytest.mark.browser,
    pytest.mark.realtime,
    pytest.mark.timeout(300),
    pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing())),
]

#: per panel of the slices stack: its title, its x-axis labels and its y-axis labels
PANELS = """Array.from(document.querySelectorAll('#slices svg g.mark-group.role-scope'))
  .filter(g => g.querySelector('.role-title-text'))
  .map(g => ({
    title: g.querySelector('.role-title-text').textContent,
    x: Array.from(g.querySelectorAll('.role-axis')).filter(a => a.querySelector('.role-axis-title')
         && a.querySelector('.role-axis-title').textContent.startsWith('seconds'))
       .flatMap(a => Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent)),
    y: Array.from(g.querySelectorAll('.role-axis')).filter(a => !(a.querySelector('.role-axis-title')
         && a.querySelector('.role-axis-title').textContent.startsWith('seconds')))
       .flatMap(a => Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent)),
    drain: Array.from(g.querySelectorAll('.mark-text text')).some(t => t.textContent === 'drain'),
  }))"""


def test_the_last_slice_ends_where_the_run_did(tmp_path: Path) -> None:
    """2 s slices over a 5 s run: slices 0-2, 2-4, 4-6 s. The last is drawn to the run's end
    (about 5 s, not 6), its sessions' closing after the planned 5 s shaded as the drain; the
    count and rate panels start at 0."""
    run = saved_load_run(tmp_path / "run", "--slice", "2", duration="5s")
    report = json.loads((run / "report.json").read_text())
    end = report["wall_s"]
    assert 5 <= end < 6  # the run ended inside the last slice
    seen = open_page(
        run / "report.html",
        screenshot_path(tmp_path, "partial-slice"),
        evaluate=f"({{panels: {PANELS}, note: document.getElementById('slices-note').innerText}})",
    )
    assert seen.problems() == []
    panels = {p["title"]: p for p in seen.facts["panels"]}
    active = panels["sessions active (mean over the slice)"]
    assert max(float(x) for x in active["x"]) < 6  # the boundary of the last slice is not drawn
    assert active["drain"]
    assert seen.facts["note"].startswith(f"The last slice is partial: the run ended at {end:.3g} s")
    assert "after 5 s (the run's planned end) its sessions were closing" in seen.facts["note"]
    for title in ("sessions active (mean over the slice)", "turns per second"):
        assert float(panels[title]["y"][0]) == 0, panels[title]  # counts and rates from 0


def test_a_run_too_short_for_charts_says_so_in_sentences(tmp_path: Path) -> None:
    """One slice and one sample of each session figure: no chart of them, a sentence each,
    and a page of sane height."""
    out = tmp_path / "run"
    done = subprocess.run(
        duplexctl_cmd(
            "load", SHORT, "--sessions", "1", "--duration", "1s", "--workers", "1", "--plain",
            "--no-server-metrics", "--out", str(out),
        ),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 1  # measured nothing (tests/test_load_answers.py)
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "too-little"),
        evaluate="({height: document.documentElement.scrollHeight,"
        " slices: !!document.getElementById('slices'),"
        " sentences: Array.from(document.querySelectorAll('.too-little')).map(e => e.innerText)})",
    )
    assert seen.problems() == [] and seen.charts_rendered == seen.charts
    assert seen.facts["height"] < 20_000
    assert not seen.facts["slices"]
    sentences = seen.facts["sentences"]
    assert any(s.startswith("One time slice only (the run lasted") for s in sentences)
    assert any(s.startswith("connect_ms: 1 sample (") for s in sentences)


def _replay(out: Path, *inputs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("replay", *inputs, "--out", str(out)),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


LEGEND = """(() => {
  const legend = document.querySelector('#timeline svg .role-legend-entry');
  const symbols = Array.from(legend.querySelectorAll('.role-legend-symbol path'));
  const labels = Array.from(legend.querySelectorAll('.role-legend-label text'));
  return labels.map((t, i) => [t.textContent, symbols[i].getAttribute('stroke')]);
})()"""


def test_every_event_type_has_one_colour_on_every_page(tmp_path: Path) -> None:
    """A plain turn and a cancelled one mark different event types; the types both show
    wear the same colour on both pages (the table's)."""
    plain = tmp_path / "plain"
    cancel = tmp_path / "cancel"
    assert _replay(plain, str(ROOT / "recordings" / "hello.wav")).returncode == 0
    done = _replay(cancel, str(ROOT / "recordings" / "cancel.toml"))
    assert done.returncode == 0, done.stderr
    legends = []
    for name, run in (("plain", plain), ("cancel", cancel)):
        seen = open_page(
            run / "report.html", screenshot_path(tmp_path, f"colours-{name}"), evaluate=LEGEND
        )
        assert seen.problems() == []
        legends.append(dict(seen.facts))
    shared = set(legends[0]) & set(legends[1])
    assert {"response.created", "first audio", "response.done"} <= shared
    assert "cancel" in legends[1] and "cancel" not in legends[0]  # the pages differ …
    for event in shared:  # … and share their colours
        assert legends[0][event] == legends[1][event] == charts.COLOURS[event], event


def test_a_failed_expectation_reads_as_text(tmp_path: Path) -> None:
    scenario = tmp_path / "expects.toml"
    scenario.write_text(
        f'name = "expects"\n[[step]]\naction = "say"\nfile = "{SHORT}"\n'
        '[[step]]\naction = "wait"\n[expect]\nbackchannels = ">=1"\n'
    )
    out = tmp_path / "run"
    done = _replay(out, str(scenario))
    assert done.returncode == 1, done.stdout + done.stderr
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "expectation-text"),
        evaluate="({failures: Array.from(document.querySelectorAll('#expectation-failures li'))"
        ".map(e => e.innerText), body: document.body.innerText})",
    )
    assert seen.problems() == []
    (failure,) = seen.facts["failures"]
    assert failure.startswith("the run: backchannels expected >=1, was 0")
    assert "\\u003e" not in seen.facts["body"] and '"expected"' not in seen.facts["body"]
