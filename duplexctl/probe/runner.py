"""Run probes against one server within a time budget.

Bounded by construction: each probe declares how long it takes against a healthy server
(``expected_s``, checked against the remaining budget before it starts — a probe that no
longer fits is skipped and says so) and a hard bound (``max_s``) after which it is stopped
and fails, so a server that never answers cannot hang the run. Every probe's sessions are
closed afterwards whatever happened, so one probe's leftovers do not eat the admission slots
the next one measures.

Before the first probe one session is opened to learn the server's capabilities (and to
fail fast, exit 3, when the server cannot be reached or refuses every session).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput, ServerUnreachable
from duplexctl.probe.context import Facts, ProbeContext, probe_settings
from duplexctl.probe.model import ProbeFailed, ProbeReport, ProbeResult, ProbeSkipped, Verdict
from duplexctl.probe.probes import select
from duplexctl.probe.registry import Probe
from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.protocol.settings import SessionSettings
from duplexctl.resolver import Command, RunSettings, check_setting, resolve

DEFAULT_BUDGET_S = 120.0
_CLEANUP_S = 20.0


@dataclass(slots=True)
class ProbeConfig:
    """What ``duplexctl probe`` was asked to do.

    ``model``, ``ref_audio`` and ``session_file`` are the session flags (None = not given);
    building the config resolves them (:mod:`duplexctl.resolver`, probe's column: sessions
    always client-committed, 16 kHz pcm16 in) into ``settings``, which the JSON report
    echoes with the origin of each value.
    """

    url: str | None = None
    api_key: str | None = None
    only: list[str] | None = None
    max_sessions: int | None = None  # the server's admission limit, when the user knows it
    disconnect_grace_s: float | None = None  # the server's disconnect grace, likewise
    budget_s: float = DEFAULT_BUDGET_S
    model: str | None = None
    ref_audio: str | None = None  # MiniCPM-o refuses to open without a voice clip
    session_file: str | None = None
    tools: str | None = None  # --tools FILE.json: the tools the tool-calls probe declares
    # server metrics (--server-metrics / --no-server-metrics / --scrape-interval), checked
    scrape: ScrapeOptions | None = None
    settings: RunSettings = field(init=False, repr=False)
    tool_list: list[dict[str, Any]] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.settings = resolve(
            Command.PROBE,
            flags={"model": self.model, "ref_audio": self.ref_audio},
            session_file=self.session_file,
        )
        self.tool_list = None if self.tools is None else declared_tools(self.tools)

    @property
    def base(self) -> SessionSettings:
        """The session every probe opens, before a probe's own additions."""
        return self.settings.session_settings()


OnResult = Callable[[ProbeResult], None]


#: refusal codes that say "this model opens model-native sessions only" (docs/protocol.md §13)
AUTO_RESPONSE_ONLY_CODES = frozenset({"unsupported_nemotron_duplex_mode"})


async def _learn_capabilities(url: str, facts: Facts, api_key: str | None) -> None:
    """Open one session to learn the capabilities; a server that refuses client-committed
    sessions because it needs ``extra_body.auto_response`` (the Nemotron lane) is probed with
    model-native sessions from then on (``facts.auto_response_only``)."""
    from duplexctl.client.connection import ConnectionOptions, DuplexConnection, HandshakeFailed

    options = ConnectionOptions(heartbeat_s=None, auto_resume=False, close_timeout_s=5.0)
    try:
        conn = await DuplexConnection.open(
            url, probe_settings(facts.base), api_key=api_key, timeout=15.0, options=options
        )
    except HandshakeFailed as exc:
        code = exc.error.code if exc.error is not None else ""
        message = exc.error.message if exc.error is not None else ""
        if code not in AUTO_RESPONSE_ONLY_CODES and "auto_response" not in message:
            raise
        facts.auto_response_only, facts.lane_refusal = True, code or message
        conn = await DuplexConnection.open(
            url,
            probe_settings(facts.base, auto_response=True),
            api_key=api_key,
            timeout=15.0,
            options=options,
        )
    facts.capabilities = dict(conn.session.capabilities)
    await conn.close()


async def run_one(
    probe: Probe, url: str, facts: Facts, *, api_key: str | None, remaining_s: float
) -> ProbeResult:
    """One probe with its hard bound; the verdict, never an exception (but exit-3 errors)."""
    t0 = time.monotonic()
    if remaining_s < probe.expected_s:
        return ProbeResult(
            probe.name,
            Verdict.SKIPPED,
            0.0,
            f"time budget: needs about {probe.expected_s:g} s, {max(0.0, remaining_s):.0f} s "
            "left (raise --budget-s or use --only)",
            catches=probe.catches,
        )
    ctx = ProbeContext(url, facts, api_key=api_key, deadline=t0 + probe.max_s)
    verdict, summary = Verdict.PASS, ""
    try:
        async with asyncio.timeout(probe.max_s):
            summary = await probe.fn(ctx)
    except ProbeFailed as exc:
        verdict, summary = Verdict.FAIL, exc.summary
    except ProbeSkipped as exc:
        verdict, summary = Verdict.SKIPPED, exc.reason
    except TimeoutError:
        verdict, summary = Verdict.FAIL, f"did not finish within its bound of {probe.max_s:g} s"
    except ServerUnreachable as exc:
        verdict, summary = Verdict.FAIL, f"server unreachable: {exc}"
    except Exception as exc:  # a probe bug must not hide the other probes' verdicts
        verdict, summary = Verdict.FAIL, f"probe error ({type(exc).__name__}): {exc}"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ctx.cleanup(), _CLEANUP_S)
    if verdict is Verdict.FAIL:
        ctx.note(f"verdict: {summary}")
    return ProbeResult(
        probe.name,
        verdict,
        (time.monotonic() - t0) * 1000,
        summary,
        catches=probe.catches,
        findings=list(ctx.findings),
        evidence=ctx.trace.evidence() if verdict is Verdict.FAIL else [],
    )


async def run_probes(
    url: str,
    config: ProbeConfig,
    facts: Facts,
    *,
    on_result: OnResult | None = None,
) -> ProbeReport:
    """Every selected probe against ``url``, in order, within ``config.budget_s``."""
    probes = select(config.only)
    t0 = time.monotonic()
    await _learn_capabilities(url, facts, config.api_key)
    results: list[ProbeResult] = []
    for p in probes:
        remaining = config.budget_s - (time.monotonic() - t0)
        result = await run_one(p, url, facts, api_key=config.api_key, remaining_s=remaining)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return ProbeReport(
        url=url,
        embedded=facts.embedded,
        results=results,
        duration_ms=(time.monotonic() - t0) * 1000,
        budget_s=config.budget_s,
        settings=config.settings.echo(),
    )


def declared_tools(path: str) -> list[dict[str, Any]]:
    """``--tools FILE.json``, checked by the resolver's one definition of tools (BadInput)."""
    try:
        return list(check_setting("tools", Path(path)))
    except ValueError as exc:
        raise BadInput(f"--tools {exc}") from None


def _facts(config: ProbeConfig) -> Facts:
    facts = Facts(base=config.base, tools=config.tool_list)
    if config.max_sessions is not None:
        facts.limit, facts.limit_source = config.max_sessions, "option"
    if config.disconnect_grace_s is not None:
        facts.disconnect_grace_s, facts.grace_source = config.disconnect_grace_s, "option"
    return facts


async def probe_target(
    config: ProbeConfig,
    *,
    on_result: OnResult | None = None,
    on_embedded: Callable[[str], None] | None = None,
) -> ProbeReport:
    """Probe ``config.url``, or — without one — the reference server started in-process
    (with ``--max-sessions`` / ``--disconnect-grace-s`` applied to it when given);
    ``on_embedded`` gets the line saying so."""
    from duplexctl.client.target import server_target, tls_for
    from duplexctl.prometheus.run import scraping, section

    facts = _facts(config)
    embedded_settings = {
        key: value
        for key, value in (
            ("max_sessions", config.max_sessions),
            ("disconnect_grace_s", config.disconnect_grace_s),
        )
        if value is not None
    }
    spelled = {"max_sessions": "--max-sessions", "disconnect_grace_s": "--disconnect-grace-s"}
    async with server_target(config.url or None, embedded_settings, spelled) as target:
        server = target.embedded
        if server is not None:
            facts.embedded = True
            facts.limit, facts.limit_source = server.max_sessions, "embedded"
            facts.disconnect_grace_s, facts.grace_source = server.disconnect_grace_s, "embedded"
            if on_embedded is not None and target.line:
                on_embedded(target.line)
        async with scraping(
            config.scrape, target.url, api_key=config.api_key, ssl_context=tls_for(target.url)
        ) as scraper:
            report = await run_probes(target.url, config, facts, on_result=on_result)
        if scraper is not None:
            scraper.release_held()
            report.server_metrics = section(scraper)
        return report
