"""Which plotting library for the HTML report: self-contained file size and render time.

The same three charts — time slices of an hour-long load run (6 series × 360 slices of 10 s),
HDR percentile curves of 6 figures (60 points each) and capacity-search steps (3 series ×
12 steps) — are written as one self-contained page (every script inline) by plotly, Bokeh
and Altair (Vega-Lite, inlined by vl-convert), then each page is opened in headless Chromium
(/usr/bin/chromium, network blocked) and timed from navigation until its charts are in the
DOM, best of ``--repeat`` runs. Run:

    .venv/bin/python bench/html_plotting.py [--repeat 3]

Needs plotly and bokeh (this script only: ``.venv/bin/pip install plotly bokeh``) besides
the dev install (altair, vl-convert-python, playwright) and Debian's chromium. Results are in
BENCHMARKS.md and docs/report.md.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

SLICES = 360
PCTS = [100 * (1 - 10 ** (-k / 10)) for k in range(60)]


def data() -> dict:
    rng = np.random.default_rng(1)
    t = np.arange(SLICES) * 10.0
    series = {
        "sessions active": 50 + 10 * np.sin(t / 600),
        "turns/s": 8 + rng.normal(0, 0.5, SLICES),
        "rejections": rng.poisson(0.3, SLICES).astype(float),
        "ttfa p50": 480 + rng.normal(0, 10, SLICES),
        "ttfa p95": 620 + rng.normal(0, 30, SLICES),
        "ttfa p99": 780 + rng.normal(0, 60, SLICES),
    }
    curves = {
        name: [float(300 + 50 * i + 40 * math.log10(1 / (1 - p / 100 + 1e-9))) for p in PCTS]
        for i, name in enumerate(["ttfa", "ttft", "turn", "first_audible", "barge_in", "resume"])
    }
    steps = {
        "level": list(range(1, 13)),
        "offered": [2.0**k for k in range(12)],
        "achieved": [min(2.0**k, 300.0) for k in range(12)],
        "ttfa p95": [500 + 30 * k * k for k in range(12)],
    }
    return {
        "t": t.tolist(),
        "series": {k: v.tolist() for k, v in series.items()},
        "curves": curves,
        "steps": steps,
    }


def plotly_page(d: dict) -> str:
    import plotly.graph_objects as go

    figs = []
    f = go.Figure([go.Scatter(x=d["t"], y=v, name=k) for k, v in d["series"].items()])
    figs.append(f)
    xs = [1 / (1 - p / 100) for p in PCTS]
    f = go.Figure([go.Scatter(x=xs, y=v, name=k) for k, v in d["curves"].items()])
    f.update_xaxes(type="log")
    figs.append(f)
    s = d["steps"]
    f = go.Figure(
        [go.Scatter(x=s["level"], y=s[k], name=k) for k in ("offered", "achieved", "ttfa p95")]
    )
    figs.append(f)
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figs)]
    return (
        "<!doctype html><html><head><meta charset='utf-8'></head><body>"
        + "".join(parts)
        + "</body></html>"
    )


def bokeh_page(d: dict) -> str:
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    p1 = figure(width=900, height=300)
    for k, v in d["series"].items():
        p1.line(d["t"], v, legend_label=k)
    p2 = figure(width=900, height=300, x_axis_type="log")
    xs = [1 / (1 - p / 100) for p in PCTS]
    for k, v in d["curves"].items():
        p2.line(xs, v, legend_label=k)
    p3 = figure(width=900, height=300)
    s = d["steps"]
    for k in ("offered", "achieved", "ttfa p95"):
        p3.line(s["level"], s[k], legend_label=k)
    return file_html(column(p1, p2, p3), resources=INLINE, title="bench")


def altair_page(d: dict) -> str:
    import altair as alt

    rows = [
        {"t": t, "series": k, "v": v[i]}
        for k, v in d["series"].items()
        for i, t in enumerate(d["t"])
    ]
    c1 = alt.Chart(alt.Data(values=rows)).mark_line().encode(x="t:Q", y="v:Q", color="series:N")
    xs = [1 / (1 - p / 100) for p in PCTS]
    rows2 = [
        {"x": xs[i], "figure": k, "v": y} for k, v in d["curves"].items() for i, y in enumerate(v)
    ]
    c2 = (
        alt.Chart(alt.Data(values=rows2))
        .mark_line()
        .encode(x=alt.X("x:Q", scale=alt.Scale(type="log")), y="v:Q", color="figure:N")
    )
    s = d["steps"]
    rows3 = [
        {"level": s["level"][i], "series": k, "v": s[k][i]}
        for k in ("offered", "achieved", "ttfa p95")
        for i in range(12)
    ]
    c3 = (
        alt.Chart(alt.Data(values=rows3)).mark_line().encode(x="level:Q", y="v:Q", color="series:N")
    )
    return alt.vconcat(c1, c2, c3).to_html(inline=True)


READY = {
    "plotly": "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3",
    "bokeh": "window.Bokeh && Bokeh.index && Object.keys(Bokeh.index).length >= 1",
    "altair": "document.querySelectorAll('canvas, svg.marks').length >= 1",
}


def render_ms(path: Path, ready: str, repeat: int) -> float:
    from playwright.sync_api import sync_playwright

    best = math.inf
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        for _ in range(repeat):
            page = browser.new_page()
            page.route(
                "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
            )
            t0 = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_function(ready, polling=5, timeout=60_000)
            best = min(best, (time.perf_counter() - t0) * 1000)
            page.close()
        browser.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    d = data()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'library':8} {'version':10} {'bytes':>10} {'render ms (best)':>18}")
        for name, make in (("plotly", plotly_page), ("bokeh", bokeh_page), ("altair", altair_page)):
            mod = __import__(name)
            path = Path(tmp) / f"{name}.html"
            path.write_text(make(d))
            ms = render_ms(path, READY[name], args.repeat)
            print(f"{name:8} {mod.__version__:10} {path.stat().st_size:>10} {ms:>18.0f}")


if __name__ == "__main__":
    main()
