"""The Typer app, how a command is registered, and the one error path of every command.

* :data:`app`: ``duplexctl``; :func:`command` registers a function of a module of this
  package as a command, with its panels and examples (duplexctl.cli.help).
* Errors: a usage error found while parsing (an unknown option, a value its parser refuses)
  and a :class:`~duplexctl.errors.DuplexctlError` raised by the command are both one line on
  stderr, ``duplexctl: error: …``, naming the option, the value and what is valid, and their
  exit code (2 bad usage, 3 unreachable, 1 a check failed). With ``--json`` the same failure
  is also one JSON document on stdout (:func:`duplexctl.errors.error_document`), so a script
  reading stdout always gets one document, also when the run could not start.
* Ctrl-C is 130; SIGTERM is made a Ctrl-C for the command's whole run.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from duplexctl import __version__
from duplexctl.cli.help import EXTRAS, Example, Extras, describe, print_group_help, print_help
from duplexctl.errors import STOP_SIGNALS, DuplexctlError, error_document
from duplexctl.terminal import guarded, json_text

F = TypeVar("F", bound=Callable[..., Any])

# Typer vendors its own click (never ``import click``: docs/testing.md "Typer"); its
# exception classes are reached through the one it exports.
_BadParameter: type[Exception] = typer.BadParameter
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)

SUMMARY = (
    "Test full-duplex speech servers (vLLM-Omni's duplex Realtime protocol): how many "
    "conversations they hold, how fast and how well they answer, and where they break."
)
#: The root help's way in: the question most people come with first.
START = (
    Example("load --find-capacity --url ws://gpu:8000", "How many conversations does it hold?"),
    Example("replay recordings/hello.wav --url ws://gpu:8000", "One scripted turn, timed"),
    Example("probe --url ws://gpu:8000", "Lifecycle bugs: leaked slots, resume gaps"),
    Example("load --help", "Every option of a command, grouped, with examples"),
)


class HelpCommand(TyperCommand):
    """A command whose ``--help`` is duplexctl.cli.help's page."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        print_help(describe(self, ctx))


#: The order of the commands in ``duplexctl --help``: the question most users come with first.
ORDER = ("load", "replay", "probe", "talk", "report", "serve")


class App(TyperGroup):
    """``duplexctl``: its own help page, and one line for every usage error."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        commands = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                commands.append((name, (cmd.help or "").split("\n\n")[0].replace("\n", " ")))
        print_group_help("duplexctl [OPTIONS] COMMAND [ARGS]...", SUMMARY, commands, START)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(
                argv,
                prog_name or "duplexctl",
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except _ClickException as exc:
            code = 2
            if type(exc).__name__ == "NoArgsIsHelpError":  # the help page was the answer
                if not standalone_mode:
                    return code
                sys.exit(code)
            message = usage_error(exc, argv)
            print(f"duplexctl: error: {message}", file=sys.stderr)
            if self._wants_json(argv):
                print(json_text(error_document(argv[0] if argv else "", code, message)))
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)

    def _wants_json(self, argv: list[str]) -> bool:
        if "--json" not in argv[1:] or not argv:
            return False
        cmd = self.commands.get(argv[0])
        return cmd is not None and any("--json" in p.opts for p in cmd.params)


def usage_error(exc: Exception, argv: list[str]) -> str:
    """A click usage error as one line: the option, the value given, what is valid."""
    message = getattr(exc, "message", None) or str(exc)
    message = message.removeprefix("Value error, ").rstrip(".")
    for library, plain in _PLAIN.items():
        message = message.replace(library, plain)
    param = getattr(exc, "param", None)
    command = argv[0] if argv and not argv[0].startswith("-") else ""
    see = f"duplexctl {command} --help".replace("  ", " ")
    if type(exc).__name__ == "MissingParameter" and param is not None:
        is_argument = getattr(param, "param_type_name", "") == "argument"
        shown = (param.name or "").upper() if is_argument else param.opts[0]
        return f"missing {shown} (see {see})"
    if isinstance(exc, _BadParameter) and param is not None:
        opts = sorted(getattr(param, "opts", []), key=len, reverse=True)
        if getattr(param, "param_type_name", "") == "argument":
            return f"{(param.name or '').upper()}: {message}"
        name = opts[0] if opts else str(getattr(exc, "param_hint", ""))
        given = _given(argv, getattr(param, "opts", []))
        if given is not None and repr(given) not in message and given not in message:
            return f"{name} {given!r}: {message}"
        return f"{name}: {message}"
    return f"{message[:1].lower()}{message[1:]} (see {see})"


#: Typer's newer messages, said plainly (the value is added beside them).
_PLAIN = {
    "Input should be a valid integer, unable to parse string as an integer": "not a whole number",
    "Input should be a valid number, unable to parse string as a number": "not a number",
    "Input should be a valid integer": "not a whole number",
    "Input should be a valid number": "not a number",
    "is not a valid integer": "is not a whole number",  # Typer 0.26's words
    "is not a valid float": "is not a number",
}


def _given(argv: list[str], opts: list[str]) -> str | None:
    """The value typed for one of ``opts`` (the last one), if any."""
    value = None
    for i, word in enumerate(argv):
        for opt in opts:
            if word == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(opt + "="):
                value = word.split("=", 1)[1]
    return value


def _version(value: bool) -> None:
    if value:
        print(f"duplexctl {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="duplexctl",
    cls=App,
    help=SUMMARY,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Test full-duplex speech servers: talk, replay, load, probe, serve."""


def _as_ctrl_c(_signum: int, _frame: Any) -> None:
    signal.raise_signal(signal.SIGINT)


def reports_errors(fn: F) -> F:
    """Turn DuplexctlError into one stderr line (and, with ``--json``, one document) and
    its exit code; Ctrl-C into 130; show everything the command prints through
    duplexctl.terminal (no control character a server sent reaches the terminal).

    The other stop signals (``errors.STOP_SIGNALS``: SIGTERM) are made a Ctrl-C for the
    command's whole run: replay, talk and load handle both in their event loops; any other
    command (probe) gets the Ctrl-C path — its sessions closed as its task is cancelled —
    instead of dying with them open. A command that printed its JSON document returns its
    exit code instead of raising, so stdout never holds two documents."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = {
            signum: signal.signal(signum, _as_ctrl_c)
            for signum in STOP_SIGNALS
            if signum != signal.SIGINT
        }
        name = fn.__name__
        try:
            with guarded():  # nothing a server sent reaches the terminal as a control character
                try:
                    code = fn(*args, **kwargs)
                except DuplexctlError as exc:
                    print(f"duplexctl: error: {exc}", file=sys.stderr)
                    if kwargs.get("json_output"):
                        print(json_text(error_document(name, exc.exit_code, str(exc))))
                    raise typer.Exit(exc.exit_code) from None
                except KeyboardInterrupt:
                    print("duplexctl: interrupted", file=sys.stderr)
                    if kwargs.get("json_output"):
                        print(json_text(error_document(name, 130, "interrupted")))
                    raise typer.Exit(130) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code:
            raise typer.Exit(code)
        return None

    return wrapper  # type: ignore[return-value]


def command(*, panels: Sequence[str], examples: Sequence[Example]) -> Callable[[F], F]:
    """Register ``fn`` as the command named after it (``_`` → ``-``): its help shows its
    options in ``panels`` (that order; the common ones first) and ``examples``. The function
    returns its exit code (None or 0: success) or raises a DuplexctlError."""

    def register(fn: F) -> F:
        name = fn.__name__.replace("_", "-")
        EXTRAS[name] = Extras(tuple(panels), tuple(examples))
        app.command(name=name, cls=HelpCommand)(reports_errors(fn))
        return fn

    return register


def say(line: str) -> None:
    """One ``duplexctl: …`` line on stderr (stdout is the result's)."""
    print(f"duplexctl: {line}", file=sys.stderr, flush=True)


def say_notes(notes: Sequence[str]) -> None:
    """Settings the resolver ignored (a command's fixed value asked otherwise): one line each."""
    for note in notes:
        say(f"note: {note}")
