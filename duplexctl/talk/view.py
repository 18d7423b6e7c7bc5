"""What ``talk`` shows: a rich live view on a terminal, plain lines otherwise.

docs/architecture.md: "Rich progress and live tables on a terminal; plain log lines when stdout is not
a TTY". The live loop reports through the small :class:`View` interface and never formats
anything itself, so the two renderings stay interchangeable (and tests read plain lines).

The live view redraws at most 10 times a second from the latest state (rich's own refresh
thread calls :meth:`LiveView._render`), so a 50 Hz level meter costs nothing on the loop.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Protocol, TextIO

from duplexctl.report.turns import TurnRecord

# figures shown per turn, in order (docs/metrics.md names)
TURN_FIGURES = (
    "ttfa_ms",
    "first_audible_ms",
    "heard_ms",
    "cancel_ack_ms",
    "heard_stop_ms",
    "local_stop_ms",
)


def turn_line(record: TurnRecord) -> str:
    """``turn 2: cancelled (turn_detected) ttfa_ms=312.1 heard_ms=1480 ...``."""
    status = record.outcome + (f" ({record.reason})" if record.reason else "")
    figs = []
    for name in TURN_FIGURES:
        fig = record.figures.get(name)
        if fig is not None and not isinstance(fig.value, dict):
            figs.append(
                f"{name}={fig.value:.1f}" if isinstance(fig.value, float) else f"{name}={fig.value}"
            )
    return f"turn {record.index}: {status} " + " ".join(figs)


class View(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def info(self, text: str) -> None: ...
    def set_state(self, **fields: Any) -> None: ...
    def level(self, dbfs: float) -> None: ...
    def transcript(self, response_id: str, delta: str) -> None: ...
    def response_finished(self, response_id: str, status: str | None, text: str) -> None: ...
    def turn(self, record: TurnRecord) -> None: ...


class PlainView:
    """One line per notable happening (stdout not a TTY: logs, CI, tests)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def info(self, text: str) -> None:
        self._print(text)

    def set_state(self, **fields: Any) -> None:
        pass

    def level(self, dbfs: float) -> None:
        pass

    def transcript(self, response_id: str, delta: str) -> None:
        pass

    def response_finished(self, response_id: str, status: str | None, text: str) -> None:
        self._print(f"assistant ({status or 'unknown'}): {text.strip() or '(no transcript)'}")

    def turn(self, record: TurnRecord) -> None:
        self._print(turn_line(record))


class LiveView:
    """A rich ``Live`` panel: session state, microphone meter, transcript, turn table."""

    def __init__(self) -> None:
        from duplexctl.terminal import console

        self.console = console()
        self.state: dict[str, Any] = {}
        self.db = -120.0
        self.peak_db = -120.0
        self.text = ""
        self.text_status = ""
        self.turns: deque[TurnRecord] = deque(maxlen=8)
        self.messages: deque[str] = deque(maxlen=6)
        self._live: Any = None

    def start(self) -> None:
        from rich.live import Live

        self._live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=10,
            transient=False,
        )
        self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def info(self, text: str) -> None:
        self.messages.append(text)

    def set_state(self, **fields: Any) -> None:
        self.state.update(fields)

    def level(self, dbfs: float) -> None:
        self.db = dbfs
        self.peak_db = max(dbfs, self.peak_db - 1.5)  # slow fall, like a meter's peak hold

    def transcript(self, response_id: str, delta: str) -> None:
        if self.text_status:
            self.text, self.text_status = "", ""
        self.text += delta

    def response_finished(self, response_id: str, status: str | None, text: str) -> None:
        self.text = text or self.text
        self.text_status = status or ""

    def turn(self, record: TurnRecord) -> None:
        self.turns.append(record)

    # -- rendering (rich's refresh thread) --

    def _meter(self) -> Any:
        from rich.text import Text

        width = 40
        lo = -70.0
        fill = round(width * min(1.0, max(0.0, (self.db - lo) / -lo)))
        peak = round((width - 1) * min(1.0, max(0.0, (self.peak_db - lo) / -lo)))
        bar = Text()
        for i in range(width):
            style = "green" if i < width * 0.7 else "yellow" if i < width * 0.9 else "red"
            if i < fill:
                bar.append("█", style=style)
            elif i == peak:
                bar.append("│", style=style)
            else:
                bar.append("·", style="dim")
        bar.append(f" {self.db:6.1f} dBFS")
        return bar

    def _render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 2))
        head.add_column(style="bold")
        head.add_column()
        for key in (
            "state", "session", "turns", "barge-in", "aec", "connection", "input", "output",
        ):  # fmt: skip
            if key in self.state:
                head.add_row(key, str(self.state[key]))
        head.add_row("mic", self._meter())

        said = Text(self.text[-600:] or "…")
        if self.text_status:
            said.append(f"  [{self.text_status}]", style="dim")

        table = Table(expand=True, show_edge=False)
        table.add_column("turn", justify="right")
        table.add_column("outcome")
        for name in TURN_FIGURES:
            table.add_column(name, justify="right")
        for rec in self.turns:
            cells = []
            for name in TURN_FIGURES:
                fig = rec.figures.get(name)
                cells.append("" if fig is None else f"{fig.value:.0f}")
            outcome = rec.outcome + (f" ({rec.reason})" if rec.reason else "")
            table.add_row(str(rec.index), outcome, *cells)

        notes = Text("\n".join(self.messages), style="dim")
        return Group(
            Panel(head, title="duplexctl talk", subtitle="Enter: end turn  c: cancel  q: quit"),
            Panel(said, title="assistant"),
            table,
            notes,
        )


def make_view(plain: bool | None = None) -> View:
    """The live view on a terminal, plain lines otherwise (or as forced)."""
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainView() if plain else LiveView()
