"""Help pages and the CLI reference, both drawn from the Typer app itself.

Why not Typer's own help: at 80 columns its six-column table cut flag names and help text
with "…" (``--measure-slot-rel…``), printed ``<bool>`` on every flag and showed defaults in
two notations (issue 35). This renderer reads the same click parameters Typer builds (names,
help, ``rich_help_panel``, default, environment variable) and the command's annotations
(``Literal`` choices), and lays out every option as its name, then its help wrapped beside or
under it: rich's ``Text.wrap`` folds instead of cutting, at any width. Only public click
attributes are read, the same in Typer 0.26 (the oldest supported) and the newest.

One model, :class:`CommandDoc`, renders ``--help`` (:func:`print_help`) and docs/cli.md
(:func:`reference`, written by tools/cli_reference.py; tests/test_cli_help.py fails when the
file is out of date), so the reference and the help cannot disagree.

What a command adds to its help is registered once, with the command
(:func:`duplexctl.cli.app.command`): the order of its panels and its examples.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

#: Options declared without a panel (``--help``) go into the command's last panel.
OTHER_PANEL: Final = "Other"


@dataclass(frozen=True, slots=True)
class Example:
    """One example of a command's help: the command line after ``duplexctl``, and what it
    answers or does."""

    command: str
    says: str


@dataclass(frozen=True, slots=True)
class Extras:
    """What a command's help shows beyond its options: the order of its panels (the common
    ones first) and its examples."""

    panels: tuple[str, ...]
    examples: tuple[Example, ...]


#: Filled by duplexctl.cli.app.command, one entry per command name.
EXTRAS: dict[str, Extras] = {}
#: Defaults that are decided elsewhere than the option (the resolver's table for session
#: settings), per command: {option name: shown default}. Set by duplexctl.cli.options.
DefaultsProvider = Callable[[str], dict[str, str]]
_DEFAULTS_PROVIDER: list[DefaultsProvider] = []


def provide_defaults(provider: DefaultsProvider) -> None:
    """Register where defaults decided outside the option declarations come from."""
    _DEFAULTS_PROVIDER[:] = [provider]


@dataclass(frozen=True, slots=True)
class OptionDoc:
    """One option or argument as a reader sees it."""

    names: str  # "--sessions", "--commit / --no-commit", "INPUTS..."
    metavar: str  # "N", "poisson|constant|gamma"; "" for a flag
    help: str
    default: str | None
    envvar: str | None
    repeatable: bool
    argument: bool = False

    @property
    def choices(self) -> bool:
        return "|" in self.metavar


@dataclass(frozen=True, slots=True)
class CommandDoc:
    """One command's help: usage, description, panels of options, examples."""

    name: str
    usage: str
    summary: str
    details: tuple[str, ...]
    panels: tuple[tuple[str, tuple[OptionDoc, ...]], ...]
    examples: tuple[Example, ...] = field(default=())


# --- reading the click command --------------------------------------------------------------


def _hints(command: Any) -> dict[str, Any]:
    """The command function's parameter annotations (``Annotated`` stripped)."""
    callback = getattr(command, "callback", None)
    if callback is None:
        return {}
    fn = inspect.unwrap(callback)
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # an annotation that cannot be evaluated: no choices
        return {}
    return hints


def _strip(annotation: Any) -> tuple[Any, bool]:
    """(the value type, repeatable) of ``T``, ``T | None``, ``list[T] | None``."""
    repeatable = False
    while True:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            annotation = rest[0] if len(rest) == 1 else str
            continue
        if origin in (list, tuple):
            repeatable = True
            annotation = args[0] if args else str
            continue
        return annotation, repeatable


def _choices(annotation: Any) -> tuple[str, ...]:
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(str(m.value) for m in annotation)
    return ()


_METAVARS: Final[dict[Any, str]] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def _metavar(param: Any, annotation: Any) -> str:
    if getattr(param, "is_flag", False):
        return ""
    value_type, _ = _strip(annotation)
    choices = _choices(value_type)
    if choices:
        return "|".join(choices)
    if param.metavar:
        return str(param.metavar)
    return _METAVARS.get(value_type, "VALUE")


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _default(param: Any, decided: dict[str, str]) -> str | None:
    long_name = next((o for o in param.opts if o.startswith("--")), None)
    if long_name in decided:
        return decided[long_name]
    show = getattr(param, "show_default", True)
    if isinstance(show, str):
        return show
    if show is False:
        return None
    default = param.default
    if callable(default) or default is None or default == [] or default == ():
        return None
    if getattr(param, "is_flag", False):
        if not param.secondary_opts:
            return None  # a plain flag is off unless given
        return param.opts[0] if default else param.secondary_opts[0]
    return _show(default)


def describe(command: Any, ctx: Any) -> CommandDoc:
    """The :class:`CommandDoc` of a click command Typer built."""
    name = command.name or ""
    extras = EXTRAS.get(name, Extras(panels=(), examples=()))
    hints = _hints(command)
    decided = _DEFAULTS_PROVIDER[0](name) if _DEFAULTS_PROVIDER else {}
    grouped: dict[str, list[OptionDoc]] = {}
    arguments: list[OptionDoc] = []
    usage_args: list[str] = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        annotation = hints.get(param.name or "", str)
        _, repeatable = _strip(annotation)
        if getattr(param, "param_type_name", "") == "argument":
            shown = (param.name or "").upper() + ("..." if param.nargs == -1 else "")
            usage_args.append(shown if param.required else f"[{shown}]")
            arguments.append(
                OptionDoc(
                    names=shown,
                    metavar="",
                    help=param.help or "",
                    default=None,
                    envvar=None,
                    repeatable=False,
                    argument=True,
                )
            )
            continue
        names = ", ".join(sorted(param.opts, key=len, reverse=True))
        if param.secondary_opts:
            names += " / " + ", ".join(param.secondary_opts)
        envvar = param.envvar if isinstance(param.envvar, str) else None
        doc = OptionDoc(
            names=names,
            metavar=_metavar(param, annotation),
            help=param.help or "",
            default=_default(param, decided),
            envvar=envvar,
            repeatable=repeatable or bool(getattr(param, "multiple", False)),
        )
        panel = getattr(param, "rich_help_panel", None) or ""
        grouped.setdefault(panel, []).append(doc)
    order = [p for p in extras.panels if p in grouped]
    order += [p for p in grouped if p and p not in order]
    loose = grouped.pop("", [])
    if loose:
        if order:
            grouped[order[-1]].extend(loose)
        else:
            grouped[OTHER_PANEL] = loose
            order.append(OTHER_PANEL)
    panels: list[tuple[str, tuple[OptionDoc, ...]]] = []
    if arguments:
        panels.append(("Arguments", tuple(arguments)))
    panels += [(p, tuple(grouped[p])) for p in order]
    text = inspect.cleandoc(command.help or "")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    usage = " ".join([f"duplexctl {name}", "[OPTIONS]", *usage_args])
    return CommandDoc(
        name=name,
        usage=usage,
        summary=paragraphs[0] if paragraphs else "",
        details=tuple(paragraphs[1:]),
        panels=tuple(panels),
        examples=extras.examples,
    )


def annotation_text(doc: OptionDoc) -> str:
    """What follows an option's help: repeatable, default, environment variable."""
    bits = []
    if doc.repeatable:
        bits.append("[repeatable]")
    if doc.default is not None:
        bits.append(f"[default: {doc.default}]")
    if doc.envvar:
        bits.append(f"[env: {doc.envvar}]")
    return " ".join(bits)


# --- the terminal page -------------------------------------------------------------------------


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _option_lines(console: Any, docs: Iterable[OptionDoc], width: int, name_width: int) -> list:
    from rich.text import Text

    lines: list[Text] = []
    help_width = max(12, width - name_width - 2)
    for doc in docs:
        name = Text(doc.names, style="bold cyan")
        if doc.metavar:
            name.append(" " + doc.metavar, style="yellow")
        body = Text(doc.help)
        extra = annotation_text(doc)
        if extra:
            body.append((" " if doc.help else "") + extra, style="dim")
        wrapped: list[Text] = (
            list(body.wrap(console, help_width, overflow="fold")) if body.plain else []
        )
        pad = " " * (name_width + 2)
        if name.cell_len <= name_width:
            first = Text.assemble(name, " " * (name_width - name.cell_len + 2))
            if wrapped:
                first.append_text(wrapped[0])
            lines.append(first)
            rest = list(wrapped)[1:]
        else:
            lines.extend(name.wrap(console, width, overflow="fold"))
            rest = list(wrapped)
        lines.extend(Text.assemble(pad, line) for line in rest)
    return lines


def _command_line(console: Any, text: str, width: int, indent: int = 2) -> list:
    """A shell command wrapped at spaces with `` \\`` continuations (copy-pasteable)."""
    from rich.text import Text

    tokens = re.findall(r"""(?:"[^"]*"|'[^']*'|\S)+""", text)
    words: list[str] = []
    for token in tokens:  # an option stays on the line of its value
        if (
            words
            and words[-1].startswith("-")
            and " " not in words[-1]
            and not token.startswith("-")
        ):
            words[-1] += " " + token
        else:
            words.append(token)
    rows: list[str] = []
    current = " " * indent + "$ "
    for word in words:
        candidate = word if current.endswith("$ ") else " " + word
        if len(current) + len(candidate) + 2 > width and not current.endswith("$ "):
            rows.append(current + " \\")
            current = " " * (indent + 4) + word
        else:
            current += candidate
    rows.append(current)
    out: list[Text] = []
    for row in rows:
        out.extend(Text(row, style="green").wrap(console, width, overflow="fold"))
    return out


def _example_lines(console: Any, examples: Iterable[Example], width: int, prog: str) -> list:
    from rich.text import Text

    lines: list[Text] = []
    for n, example in enumerate(examples):
        if n:
            lines.append(Text(""))
        lines.extend(Text(example.says, style="dim").wrap(console, width, overflow="fold"))
        lines.extend(_command_line(console, f"{prog} {example.command}", width))
    return lines


def _panel(title: str, lines: list) -> Any:
    from rich.console import Group
    from rich.panel import Panel

    return Panel(Group(*lines), title=title, title_align="left", border_style="dim", padding=(0, 1))


def print_help(doc: CommandDoc, *, prog: str = "duplexctl") -> None:
    """``duplexctl COMMAND --help``: usage, what it does, the panels, the examples."""
    from rich.padding import Padding
    from rich.text import Text

    console = _console()
    width = console.width
    inner = max(20, width - 4)
    console.print(Padding(Text("Usage: " + doc.usage, style="bold"), (1, 1, 1, 1)))
    for n, paragraph in enumerate((doc.summary, *doc.details)):
        if paragraph:
            console.print(Padding(Text(paragraph, style="" if n == 0 else "dim"), (0, 1, 1, 1)))
    everything = [o for _, docs in doc.panels for o in docs]
    cap = max(12, min(30, inner * 2 // 5))
    fitting = [_name_len(o) for o in everything if _name_len(o) <= cap]
    name_width = max(fitting, default=cap)
    for title, docs in doc.panels:
        console.print(_panel(title, _option_lines(console, docs, inner, name_width)))
    if doc.examples:
        console.print(_panel("Examples", _example_lines(console, doc.examples, inner, prog)))


def _name_len(doc: OptionDoc) -> int:
    return len(doc.names) + (len(doc.metavar) + 1 if doc.metavar else 0)


def print_group_help(
    usage: str, summary: str, commands: list[tuple[str, str]], examples: Iterable[Example]
) -> None:
    """``duplexctl --help``: the commands, then how to start."""
    from rich.padding import Padding
    from rich.text import Text

    console = _console()
    inner = max(20, console.width - 4)
    console.print(Padding(Text("Usage: " + usage, style="bold"), (1, 1, 1, 1)))
    console.print(Padding(Text(summary), (0, 1, 1, 1)))
    name_width = max((len(name) for name, _ in commands), default=8)
    rows = [
        OptionDoc(names=name, metavar="", help=text, default=None, envvar=None, repeatable=False)
        for name, text in commands
    ]
    console.print(_panel("Commands", _option_lines(console, rows, inner, name_width)))
    console.print(_panel("Start here", _example_lines(console, examples, inner, "duplexctl")))


# --- docs/cli.md ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference(docs: Iterable[CommandDoc]) -> str:
    """docs/cli.md's generated part: every command, every option, its default and
    environment variable, then its examples."""
    out: list[str] = []
    for doc in docs:
        out += [f"## duplexctl {doc.name}", "", doc.summary, ""]
        out += [*(f"{p}\n" for p in doc.details)]
        out += [f"Usage: `{doc.usage}`", ""]
        for title, options in doc.panels:
            out += [f"### {doc.name}: {title}", ""]
            out += ["| option | default | env | what it does |", "|---|---|---|---|"]
            for o in options:
                name = o.names + (f" {o.metavar}" if o.metavar else "")
                help_text = o.help + (" (repeatable)" if o.repeatable else "")
                out.append(
                    f"| `{_cell(name)}` | {_cell(o.default or '')} | {o.envvar or ''} "
                    f"| {_cell(help_text)} |"
                )
            out.append("")
        if doc.examples:
            out += [f"### {doc.name}: examples", ""]
            out += [f"- {e.says}: `duplexctl {e.command}`" for e in doc.examples]
            out.append("")
    return "\n".join(out).rstrip() + "\n"
