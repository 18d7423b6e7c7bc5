"""``duplexctl probe``: conformance and lifecycle-race probes, one verdict per probe.

Each probe (``duplexctl/probe/probes/``) targets one class of server bug — leaked admission
slots, responses that never end, stuck turn gates, lost or duplicated events across resume —
and says in its docstring what it catches and why it matters. The runner runs them within a
time budget against a URL or the embedded reference server; verdicts carry their evidence.

Public API::

    from duplexctl.probe import ProbeConfig, probe_target, render, all_probes
    report = asyncio.run(probe_target(ProbeConfig(url=None, only=["admission"])))
    report.ok; report.to_dict(); render(report)
"""

from duplexctl.probe.model import ProbeReport, ProbeResult, TraceEntry, Verdict
from duplexctl.probe.probes import all_probes, select
from duplexctl.probe.render import render, result_lines, summary_line
from duplexctl.probe.runner import ProbeConfig, probe_target, run_probes

__all__ = [
    "ProbeConfig",
    "ProbeReport",
    "ProbeResult",
    "TraceEntry",
    "Verdict",
    "all_probes",
    "probe_target",
    "render",
    "result_lines",
    "run_probes",
    "select",
    "summary_line",
]
