"""One page, one file: Jinja2 templates with the Vega-Lite runtime and every style inline.

Why inline: a report is forwarded and opened offline, months later; a page whose scripts
come from the web breaks when they move (docs/report.md). Why Vega-Lite (through Altair):
measured against plotly and Bokeh on the same hour-long load run (bench/html_plotting.py),
its page is the smallest (about 1.0 MB against 1.4 MB and 4.9 MB) and renders fastest in
headless Chromium; its runtime is inlined from vl-convert's bundle, so nothing is fetched.

Charts are Vega-Lite specs (dicts) rendered by ``vegaEmbed`` into ``<div class="chart">``
elements as SVG; each chart's div gets ``data-rendered`` when drawn (the browser tests check
it) and the page's JavaScript does nothing else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from duplexctl import __version__, rundir
from duplexctl.errors import WriteFailed

PAGE_NAME: Final = "report.html"
#: what the bundle exposes to the page's own script: only vegaEmbed
_EXPOSE: Final = "window.vegaEmbed = vegaEmbed;"


@functools.cache
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("duplexctl.report.html", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = format_number
    env.filters["pct"] = format_percent
    return env


@functools.cache
def vega_runtime() -> str:
    """Vega, Vega-Lite and vega-embed as one script (vl-convert's bundle, no imports).

    vl-convert bundles on every call (about 2 s), so the bundle is kept on disk per
    vl-convert version, Vega-Lite version and snippet: a run's page then costs about a
    quarter of a second, not two (the test suite writes hundreds)."""
    import importlib.metadata

    import altair as alt

    # the runtime of the Vega-Lite version Altair writes specs for (vl-convert names it v6_4)
    version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
    tool = importlib.metadata.version("vl-convert-python")
    tag = hashlib.sha256(f"{tool} {version} {_EXPOSE}".encode()).hexdigest()[:16]
    cache = _cache_dir() / f"vega-runtime-{tag}.js"
    try:
        return cache.read_text(encoding="utf-8")
    except OSError:
        pass
    import vl_convert

    bundle: str = vl_convert.javascript_bundle(_EXPOSE, vl_version=version)
    # the bundle ends up inside <script>: a literal "</script" in it would close the element
    bundle = bundle.replace("</script", "<\\/script")
    with contextlib.suppress(WriteFailed):  # no writable cache: bundle again next time
        write_atomic(cache, bundle)
    return bundle


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "duplexctl"


def format_number(value: Any, digits: int = 3) -> str:
    """Numbers as a person reads them: 3 significant digits, thousands kept whole."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "–"
        if abs(value) >= 10**digits:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def format_percent(value: Any) -> str:
    if value is None:
        return "–"
    return f"{100 * float(value):.3g} %"


def render(template: str, *, title: str, charts: Mapping[str, Any], **context: Any) -> str:
    """The page: ``charts`` maps each chart's element id to its Vega-Lite spec."""
    env = _environment()
    return str(
        env.get_template(template).render(
            title=title,
            charts=dict(charts),
            vega_runtime=vega_runtime() if charts else "",
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            version=__version__,
            **context,
        )
    )


def render_verdict(
    template: str,
    *,
    command: str,
    verdict: tuple[str, str],
    charts: Mapping[str, Any],
    flags: Sequence[tuple[str, str]] = (),
    **context: Any,
) -> str:
    """A run's page: titled by its verdict (word, css class), the flags that qualify it."""
    return render(
        template,
        title=f"duplexctl {command} — {verdict[0]}",
        charts=charts,
        verdict=verdict,
        flags=list(flags),
        **context,
    )


def write_atomic(path: Path, html: str) -> Path:
    """Write then rename: a reader (or a Ctrl-C) never sees half a page (rundir.write_atomic;
    a write that fails is :class:`~duplexctl.errors.WriteFailed`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteFailed(path.parent, exc) from None
    rundir.write_atomic(path, html)
    return path


def write_beside(
    build: Callable[[], str], out_dir: Path, writes: rundir.Writes | None = None
) -> Path | None:
    """``--out DIR``'s report.html, written at the end of a run (or on Ctrl-C).

    The run's data is already saved (report.json …) when this is called; a page that cannot
    be built must not cost the run its exit code, so the failure is one warning line and
    the JSON stays the record. A write that fails goes to the run's ``writes`` (exit 4, said
    once); after one, nothing is attempted."""
    if writes is not None and not writes.ok:
        return None
    path = out_dir / PAGE_NAME
    try:
        html = build()
    except Exception as exc:  # reported, not raised: see the docstring
        print(f"duplexctl: warning: {path} not written: {exc!r}", file=sys.stderr)
        return None
    if writes is not None:
        return path if rundir.write_atomic(path, html, writes) else None
    try:
        return write_atomic(path, html)
    except WriteFailed as exc:
        print(f"duplexctl: warning: {path} not written: {exc}", file=sys.stderr)
        return None


def command_line(argv: Sequence[str]) -> str:
    """The command as typed, for the page; an ``--api-key`` value is never written."""
    words = ["duplexctl", *argv[1:]]
    for i, word in enumerate(words):
        if word.startswith("--api-key="):
            words[i] = "--api-key=***"
        elif word == "--api-key" and i + 1 < len(words):
            words[i + 1] = "***"
    return shlex.join(words)
