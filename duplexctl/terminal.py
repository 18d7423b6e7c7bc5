"""What reaches a terminal or a spreadsheet: text that did not come from duplexctl, made inert.

A server under test (or a compromised one, or a saved report) chooses many strings duplexctl
shows: error codes and messages, transcripts, session and item ids, model names, metric
labels. Printed as they came, ``ESC [2J`` clears the tester's screen, ``ESC ] 0;… BEL``
retitles the window, ``ESC ] 52;c;… BEL`` writes the clipboard, a C1 byte (U+0080–U+009F) is
a one-character ESC on some terminals; rich would also read ``[link=…]`` or ``[on red]`` in
such a string as markup. One rule, :func:`visible`, answers all of them: every C0 control,
DEL and every C1 control is shown as its escape (``\\x1b``, ``\\x07``, ``\\x9b``), so the
reader sees what the server sent and the terminal executes none of it.

Where it applies, once each:

* **plain output**: every command's stdout and stderr are :class:`VisibleStream` for as long
  as the command runs (:func:`guarded`, installed by ``cli.reports_errors``), so every
  ``print`` of every command is covered, whatever string it formats (newlines and tabs, which
  duplexctl's own lines use, pass);
* **rich output** (tables and live views on a terminal): :func:`console` is the one way
  duplexctl makes a rich ``Console``: it writes to the real stream (rich's own styling must
  reach the terminal), never reads markup or emoji codes in strings, and shows every string
  and text segment it renders through :func:`visible`;
* **JSON on stdout** keeps the exact text (:func:`json_text`: JSON's own escapes, DEL
  included); HTML pages escape through their templates; files keep what was received;
* **CSV cells** a spreadsheet would execute as a formula (``=``, ``+``, ``-``, ``@`` first,
  or a tab or carriage return) get a leading ``'`` (:func:`csv_cell`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final, TextIO

#: every C0 control, DEL and every C1 control, as the escape that shows it
_ESCAPES: Final = {
    code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))
}
#: what duplexctl's own lines contain and a terminal may act on harmlessly
_LINE_LAYOUT: Final = "\n\t"
_TABLES: dict[str, dict[int, str]] = {}
#: first characters that make a spreadsheet read a cell as a formula (OWASP "CSV injection")
_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")


def visible(text: object, keep: str = "") -> str:
    """``text`` with every control character (C0, DEL, C1) shown as ``\\xNN``, except the
    characters of ``keep`` (a line sink keeps ``\\n``)."""
    table = _TABLES.get(keep)
    if table is None:
        table = _TABLES[keep] = {k: v for k, v in _ESCAPES.items() if chr(k) not in keep}
    return str(text).translate(table)


class VisibleStream:
    """A text stream that shows what is written to it through :func:`visible` (newlines and
    tabs kept) and otherwise behaves like the stream it wraps (``isatty``, ``fileno`` …)."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(visible(text, _LINE_LAYOUT))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def raw(stream: IO[str] | None) -> TextIO:
    """The stream under a :class:`VisibleStream` (``None``: stdout's)."""
    stream = sys.stdout if stream is None else stream
    return stream.raw if isinstance(stream, VisibleStream) else stream  # type: ignore[return-value]


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """stdout and stderr as :class:`VisibleStream` for the duration (once: nesting is a
    no-op); the streams that were there are put back after."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, VisibleStream):
        sys.stdout = VisibleStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, VisibleStream):
        sys.stderr = VisibleStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def console(stream: IO[str] | None = None, **options: Any) -> Any:
    """duplexctl's rich ``Console`` on ``stream`` (default stdout): see the module docstring.
    ``options`` go to rich (``width``, ``force_terminal`` …)."""
    options.setdefault("markup", False)
    options.setdefault("emoji", False)
    return _console_class()(file=raw(stream), **options)


@functools.cache
def _console_class() -> type:
    """A rich ``Console`` whose strings and rendered text go through :func:`visible` (rich
    imported only when a command draws with it)."""
    from rich.console import Console
    from rich.segment import Segment
    from rich.text import Text

    class VisibleConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Text:
            return super().render_str(visible(text, "\n"), **kwargs)

        def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
            for segment in super().render(renderable, options):
                if segment.control is None and segment.text:
                    shown = visible(segment.text, "\n")
                    if shown != segment.text:
                        segment = Segment(shown, segment.style)
                yield segment

    return VisibleConsole


def json_text(doc: Any, *, indent: int | None = None) -> str:
    """``doc`` as JSON for a terminal: JSON's own escapes for every control character (the
    text stays exact for a reader of the JSON), DEL included, which ``json`` leaves raw."""
    return json.dumps(doc, indent=indent, default=str).replace("\x7f", "\\u007f")


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula gets a
    leading ``'``; numbers and other strings are unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
