"""The README and the guides are executable: every ``duplexctl`` command in their shell blocks
runs (issues 17.8, 35).

Why: a README drifts the moment a flag is renamed, a default changes or an example stops
working, and nobody reads it again until a user pastes a command that fails. So this test
extracts every ``duplexctl …`` (and ``.venv/bin/duplexctl …``) command from the ```bash blocks
of README.md and of the task guides in docs/ (:data:`DOCUMENTS`; continuation lines joined),
runs each as a user would — its own process, in a fresh directory — and requires the exit
code the text gives it: 0, or the code its comment names (``# … exit 3``).

What is run as written and what is not: a README example names servers and files a test
machine does not have (``ws://gpu:8000``, ``my-ca.pem``) and durations CI cannot spend
(``--duration 5m``). Every change the test makes is one row of :data:`REWRITES`, and each
command records the rows it needed (checked below), so a reader sees exactly what ran.
Nothing is skipped except ``talk`` when no PulseAudio can be started (it then says so); its
microphone example runs against the private PulseAudio of tests/support/pulse.py, whose microphone is
the monitor of a null sink.

Blocks run in parallel (commands of one block in order, in one directory: ``load --out run1``
then ``report run1`` works as written); about two minutes in all. A block whose exit codes
include a time bound's verdict (:func:`judges_a_time_bound`) runs apart, marked ``timing``,
in the quiet lane: its verdict is the reference server's latency, which a busy machine
changes. Traffic stays on loopback.
A guide's block that cannot run here (a walk-through over several hosts) is a ```text block,
and says so; :data:`SHOWN_NOT_RUN` lists each, so none hides by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shlex
import ssl
import subprocess
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from support.commands import duplexctl_cmd, serve

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The texts whose shell blocks are run: the README, the reference that shows commands, and
#: the task guides.
DOCUMENTS = (
    "README.md",
    "docs/cli.md",
    "docs/capacity.md",
    "docs/regression.md",
    "docs/checks.md",
    "docs/talk.md",
    "docs/cluster.md",
    "docs/testing-the-tester.md",
)
#: Blocks that show ``duplexctl`` commands without running them, and why (by document).
SHOWN_NOT_RUN: dict[str, str] = {
    "docs/cluster.md": "the walk-through starts Ray on several hosts (tests/test_load_ray.py "
    "runs the same on a two-node cluster of one host)",
}
#: The README stays a front page: reference and findings live in docs/.
README_MAX_BYTES = 10 * 1024

#: Every change the test makes to what the README says, and why. A command that needed a
#: change not listed here fails (test_every_rewrite_is_listed).
REWRITES: dict[str, str] = {
    "program": "`duplexctl` / `.venv/bin/duplexctl` → `python -m duplexctl` of this checkout, "
    "run in a fresh temporary directory holding a `recordings` link to the checkout's "
    "(the README's paths are relative to a checkout)",
    "environment": "DUPLEXCTL_URL, DUPLEXCTL_API_KEY, DUPLEXCTL_CA_FILE and DUPLEXCTL_INSECURE "
    "are removed from the environment, so a command runs as written",
    "serve-port": "`duplexctl serve …` gets `--port 0` (a free loopback port); it is checked "
    "with GET /health, then stopped with SIGTERM and must exit 0",
    "remote-url": "a `--url` naming another host (`ws://gpu:8000/…`, `http://gpu:8000`) → the "
    "same URL on 127.0.0.1 and the port of a `duplexctl serve` started for that command with "
    "the options the command implies: `--max-sessions` = its `--sessions` (at least 4), "
    "`--disconnect-grace-s` = its `--disconnect-grace-s`",
    "tls-front": "a `wss://` / `https://` URL of another host → a TLS front on 127.0.0.1 "
    "(certificate for 127.0.0.1 from a throwaway CA, trustme) relaying to such a serve",
    "ca-file": "`--ca-file my-ca.pem` → that throwaway CA's PEM file",
    "load-duration": "load's `--duration` above 13s → 13s (one turn of the bundled inputs "
    "takes about 6 s, and 50 sessions start over 2 s: the shortest run load itself accepts "
    "as measuring something)",
    "step-duration": "`--step-duration` above 8s → 8s (also set when absent: 20s by default)",
    "capacity-bounds": "`--find-capacity` gets `--max-level 2`, and its server a 2 s "
    "disconnect grace: without `--url` `--server-option disconnect_grace_s=2`, with a remote "
    "`--url` the `duplexctl serve` started for it `--disconnect-grace-s 2` (its slot-release "
    "measurement after an abrupt drop waits for the server's disconnect grace, 30 s by "
    "default)",
    "talk-duration": "`talk` (but `--list-devices`) runs at most 6 s: `--duration` above 6 "
    "→ 6, added when absent (talk otherwise runs until `q` or Ctrl-C)",
    "talk-sound": "`talk` runs against a private PulseAudio (tests/support/pulse.py): the microphone "
    "is the monitor of a null sink, the speaker that sink",
}
#: Files the README expects its reader to have, written into a block's directory first.
READER_FILES: dict[str, str] = {
    "session.json": json.dumps(
        {"temperature": 0.7, "turn_detection": {"type": "server_vad", "threshold": 0.6}}
    ),
}
LOAD_DURATION_S = 13
STEP_DURATION_S = 8
TALK_DURATION_S = 6
COMMAND_TIMEOUT_S = 240
PARALLEL_BLOCKS = 3
#: the time-bound blocks run two at a time: they are timed, and one of them is the
#: regression guide's two 50-session loads, which take a core between them
TIMED_PARALLEL_BLOCKS = 2
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_ENV_DROPPED = ("DUPLEXCTL_URL", "DUPLEXCTL_API_KEY", "DUPLEXCTL_CA_FILE", "DUPLEXCTL_INSECURE")
_EXIT_COMMENT = re.compile(r"\bexit (\d+)\b")


# --- reading the README ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Example:
    """One ``duplexctl`` command of a document: its block, line, words and expected exit."""

    block: int
    line: int
    text: str
    argv: tuple[str, ...]  # after the program name
    expected_exit: int
    source: str = "README.md"

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}: duplexctl {' '.join(self.argv)}"[:120]


@dataclass(frozen=True, slots=True)
class Fence:
    lang: str
    first_line: int
    lines: tuple[str, ...]


def fences(text: str) -> list[Fence]:
    """The fenced code blocks of a Markdown text, with the line number of their first line."""
    out: list[Fence] = []
    lang: str | None = None
    body: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, body, start = line[3:].strip(), [], n + 1
            else:
                out.append(Fence(lang, start, tuple(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    return out


def _is_duplexctl(word: str) -> bool:
    return word == "duplexctl" or word.endswith("/duplexctl")


def examples(text: str, source: str = "README.md") -> list[Example]:
    """Every ``duplexctl`` command of the ```bash blocks, continuation lines joined."""
    found: list[Example] = []
    for index, fence in enumerate(f for f in fences(text) if f.lang in ("bash", "sh", "shell")):
        logical: list[tuple[int, str]] = []
        pending = ""
        pending_line = 0
        for offset, raw in enumerate(fence.lines):
            if not pending:
                pending_line = fence.first_line + offset
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1] + " "
                continue
            logical.append((pending_line, pending + raw))
            pending = ""
        for line_no, line in logical:
            code, _, comment = (
                re.split(r"(\s#)", line, maxsplit=1) if " #" in line else (line, "", "")
            )
            expected = _EXIT_COMMENT.search(comment)
            words = shlex.split(code)
            commands: list[list[str]] = [[]]
            for word in words:
                if word in ("&&", "||", ";"):
                    commands.append([])
                else:
                    commands[-1].append(word)
            for command in commands:
                if command and _is_duplexctl(command[0]):
                    found.append(
                        Example(
                            block=index,
                            line=line_no,
                            text=" ".join(line.split()),
                            argv=tuple(command[1:]),
                            expected_exit=int(expected.group(1)) if expected else 0,
                            source=source,
                        )
                    )
    return found


README_EXAMPLES = examples(README.read_text(encoding="utf-8"))
EXAMPLES = [
    example
    for document in DOCUMENTS
    for example in examples((ROOT / document).read_text(encoding="utf-8"), document)
]
_TIME_THRESHOLD = re.compile(r"\d\s*(ms|s)\s*$")


def judges_a_time_bound(example: Example) -> bool:
    """Whether the example's exit code is the verdict of a time bound on the server it
    measures: an ``--slo`` with a duration threshold (``ttfa_p99<=2s``), a capacity search
    (its steps are judged by such SLOs), or a replay of a scenario (``.toml``), whose
    expectations judge the conversation in time — a stop latency under 400 ms, a barge-in
    that lands while the answer plays, a backchannel while the user speaks. On a busy
    machine the reference server answers late and the verdict changes, so these examples
    run in the quiet lane."""
    argv = example.argv
    slos = [v for w, v in itertools.pairwise(argv) if w == "--slo"]
    slos += [w.split("=", 1)[1] for w in argv if w.startswith("--slo=")]
    scenario = argv[:1] == ("replay",) and any(w.endswith(".toml") for w in argv[1:])
    return "--find-capacity" in argv or scenario or any(_TIME_THRESHOLD.search(s) for s in slos)


def _blocks(of: list[Example]) -> list[list[Example]]:
    blocks: dict[tuple[str, int], list[Example]] = {}
    for example in of:
        blocks.setdefault((example.source, example.block), []).append(example)
    return list(blocks.values())


#: The blocks with an example that judges a time bound (:func:`judges_a_time_bound`), run as
#: tests marked ``timing``: the serial lane, at normal priority (docs/testing.md "Lanes").
TIMED_EXAMPLES = [
    e for block in _blocks(EXAMPLES) if any(map(judges_a_time_bound, block)) for e in block
]
UNTIMED_EXAMPLES = [e for e in EXAMPLES if e not in TIMED_EXAMPLES]


# --- rewriting one command -------------------------------------------------------------------


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` (or ``--name=VALUE``), the last one given."""
    value = None
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def _set_option(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with ``--name`` set to ``value`` (replaced where given, else appended)."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(argv):
        if skip:
            skip = False
            continue
        if word == name and i + 1 < len(argv):
            skip = True
            continue
        if word.startswith(name + "="):
            continue
        out.append(word)
    return [*out, name, value]


def _seconds(text: str) -> float:
    """``60s``, ``5m``, ``12`` → seconds (load's and talk's duration syntax)."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    match = re.fullmatch(r"([\d.]+)\s*(ms|s|m|h)?", text.strip())
    assert match, f"unreadable duration {text!r}"
    return float(match.group(1)) * units[match.group(2) or "s"]


def _remote(url: str | None) -> bool:
    """A URL the test must provide a server for (a well-formed one naming another host)."""
    if url is None or "://" not in url:
        return False
    parts = urlsplit(url)
    return parts.scheme in ("ws", "wss", "http", "https") and parts.hostname not in _LOOPBACK


@dataclass(slots=True)
class Planned:
    """What the test runs for one example, and the rewrites that needed."""

    argv: list[str]
    applied: list[str] = field(default_factory=list)
    serve_args: list[str] | None = None  # start `duplexctl serve` for a remote --url
    tls: bool = False  # … behind a TLS front


def plan(example: Example) -> Planned:
    """The README command as the test runs it (see :data:`REWRITES`)."""
    argv = list(example.argv)
    p = Planned(argv, ["program", "environment"])
    command = argv[0] if argv else ""
    if command == "serve":
        p.applied.append("serve-port")  # support.commands.serve adds --port 0
    url = _option(argv, "--url")
    if _remote(url):
        assert url is not None
        sessions = _option(argv, "--sessions")
        p.serve_args = ["--max-sessions", str(max(4, int(sessions or 4)))]
        grace = _option(argv, "--disconnect-grace-s")
        if grace is None and "--find-capacity" in argv:
            grace = "2"  # capacity-bounds
        if grace is not None:
            p.serve_args += ["--disconnect-grace-s", grace]
        p.applied.append("remote-url")
        if urlsplit(url).scheme in ("wss", "https"):
            p.tls = True
            p.applied.append("tls-front")
            if _option(argv, "--ca-file") is not None:
                p.applied.append("ca-file")
    if command == "load":
        duration = _option(argv, "--duration")
        if duration is not None and _seconds(duration) > LOAD_DURATION_S:
            p.argv = argv = _set_option(argv, "--duration", f"{LOAD_DURATION_S}s")
            p.applied.append("load-duration")
        if "--find-capacity" in argv:
            step = _option(argv, "--step-duration")
            if step is None or _seconds(step) > STEP_DURATION_S:
                p.argv = argv = _set_option(argv, "--step-duration", f"{STEP_DURATION_S}s")
                p.applied.append("step-duration")
            if _option(argv, "--max-level") is None:
                p.argv = argv = _set_option(argv, "--max-level", "2")
            if url is None:
                argv += ["--server-option", "disconnect_grace_s=2"]
            p.applied.append("capacity-bounds")
    if command == "talk" and "--list-devices" not in argv:
        duration = _option(argv, "--duration")
        if duration is None or _seconds(duration) > TALK_DURATION_S:
            p.argv = argv = _set_option(argv, "--duration", str(TALK_DURATION_S))
            p.applied.append("talk-duration")
    if command == "talk":
        p.applied.append("talk-sound")
    return p


# --- servers the examples name --------------------------------------------------------------


@contextlib.contextmanager
def tls_front(target_port: int, workdir: Path) -> Iterator[tuple[int, Path]]:
    """A TLS listener on 127.0.0.1 relaying every connection to ``target_port``: yields its
    port and the PEM of the throwaway CA that signed its certificate."""
    from support.hostile_servers import _tls_contexts  # the suite's one way to make a test CA

    context, ca_file = _tls_contexts(workdir)

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(relay, "127.0.0.1", 0, ssl=context))
    port = int(server.sockets[0].getsockname()[1])
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port, ca_file
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _health(url: str) -> int:
    port = urlsplit(url).port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return int(answer.status)


# --- running ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    example: Example
    planned: Planned
    ran: list[str]
    code: int | None
    stdout: str
    stderr: str
    skipped: str | None = None

    def describe(self) -> str:
        return (
            f"README line {self.example.line}: {self.example.text}\n"
            f"ran: {shlex.join(self.ran)}\nrewrites: {', '.join(self.planned.applied)}\n"
            f"exit {self.code} (README: {self.example.expected_exit})\n"
            f"--- stdout (end) ---\n{self.stdout[-3000:]}\n--- stderr (end) ---\n"
            f"{self.stderr[-3000:]}"
        )


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROPPED}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_example(example: Example, workdir: Path, sound: dict[str, str] | None) -> Outcome:
    """Run one README command as :func:`plan` says, in ``workdir``."""
    p = plan(example)
    argv = list(p.argv)
    if argv and argv[0] == "talk" and sound is None:
        return Outcome(example, p, [], None, "", "", skipped="no PulseAudio for talk")
    env = _environment(sound if sound is not None and argv[:1] == ["talk"] else {})
    with contextlib.ExitStack() as stack:
        if argv[:1] == ["serve"]:
            url, proc = stack.enter_context(serve(*argv[1:]))
            status = _health(url)
            stack.close()
            return Outcome(
                example, p, duplexctl_cmd(*argv, "--port", "0"),
                0 if status == 200 and proc.returncode == 0 else 1,
                f"/health {status}", f"serve exited {proc.returncode}",
            )  # fmt: skip
        if p.serve_args is not None:
            served, _ = stack.enter_context(serve(*p.serve_args))
            port = int(urlsplit(served).port or 0)
            typed = _option(argv, "--url")
            assert typed is not None
            parts = urlsplit(typed)
            if p.tls:
                port, ca_file = stack.enter_context(tls_front(port, workdir))
                if _option(argv, "--ca-file") is not None:
                    argv = _set_option(argv, "--ca-file", str(ca_file))
            local = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
            argv = _set_option(argv, "--url", local)
        ran = duplexctl_cmd(*argv)
        try:
            done = subprocess.run(
                ran, cwd=workdir, env=env, capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            return Outcome(example, p, ran, None, str(exc.stdout), f"timed out: {exc}")
    return Outcome(example, p, ran, done.returncode, done.stdout, done.stderr)


def run_block(block: list[Example], sound: dict[str, str] | None) -> list[Outcome]:
    """One README block, command after command, in a directory of its own."""
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        workdir = Path(tmp)
        (workdir / "recordings").symlink_to(ROOT / "recordings")
        for name, content in READER_FILES.items():
            (workdir / name).write_text(content)
        return [run_example(example, workdir, sound) for example in block]


@contextlib.contextmanager
def run_blocks(of: list[Example], parallel: int) -> Iterator[dict[Example, Outcome]]:
    """The examples run once, ``parallel`` blocks at a time (talk's with a private
    PulseAudio)."""
    from support.pulse import pulseaudio_available, start_pulse

    talks = any(e.argv[:1] == ("talk",) for e in of)
    sound_server = start_pulse() if talks and pulseaudio_available() else None
    try:
        sound = sound_server.env if sound_server is not None else None
        # the longest blocks first, so the parallel run ends soonest
        order = sorted(_blocks(of), key=len, reverse=True)
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            results = pool.map(lambda block: run_block(block, sound), order)
            yield {o.example: o for outcomes in results for o in outcomes}
    finally:
        if sound_server is not None:
            sound_server.stop()


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[Example, Outcome]]:
    """Every example that judges no time bound, run once."""
    with run_blocks(UNTIMED_EXAMPLES, PARALLEL_BLOCKS) as ran:
        yield ran


@pytest.fixture(scope="module")
def timed_outcomes() -> Iterator[dict[Example, Outcome]]:
    """The blocks whose exit codes are time bounds' verdicts, run once in the quiet lane."""
    with run_blocks(TIMED_EXAMPLES, TIMED_PARALLEL_BLOCKS) as ran:
        yield ran


# --- the tests -------------------------------------------------------------------------------


def _check(example: Example, outcome: Outcome) -> None:
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    assert outcome.code == example.expected_exit, outcome.describe()


@pytest.mark.slow
@pytest.mark.parametrize("example", UNTIMED_EXAMPLES, ids=lambda e: e.id)
def test_readme_example_runs(example: Example, outcomes: dict[Example, Outcome]) -> None:
    _check(example, outcomes[example])


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize("example", TIMED_EXAMPLES, ids=lambda e: e.id)
def test_readme_example_judged_by_a_time_bound_runs(
    example: Example, timed_outcomes: dict[Example, Outcome]
) -> None:
    _check(example, timed_outcomes[example])


def test_the_time_bound_examples_are_told_apart() -> None:
    """The quiet lane gets the verdicts of time bounds and nothing else."""

    def ex(*argv: str) -> Example:
        return Example(0, 1, "", argv, 0)

    assert judges_a_time_bound(ex("report", "run2", "--slo", "ttfa_p99<=2s"))
    assert judges_a_time_bound(ex("load", "--slo=ttfa_p95<=800ms"))
    assert judges_a_time_bound(ex("load", "--find-capacity", "--slo", "failure_rate<=0.01"))
    assert not judges_a_time_bound(ex("load", "--slo", "failure_rate<=0"))
    assert judges_a_time_bound(ex("replay", "recordings/backchannel.toml"))
    assert not judges_a_time_bound(ex("replay", "recordings/hello.wav"))
    assert not judges_a_time_bound(ex("report", "run1", "--out", "x.toml"))
    timed = {(e.source, e.line) for e in TIMED_EXAMPLES}
    assert ("docs/regression.md", 16) in timed and ("docs/regression.md", 9) in timed
    assert not timed & {(e.source, e.line) for e in UNTIMED_EXAMPLES}


def test_the_readme_has_examples_of_every_command() -> None:
    commands = {e.argv[0] for e in README_EXAMPLES if e.argv}
    assert commands >= {"replay", "load", "report", "talk", "probe", "serve"}


def test_every_rewrite_is_listed() -> None:
    used = {name for e in EXAMPLES for name in plan(e).applied}
    assert used <= REWRITES.keys()


def test_no_example_hides_outside_a_shell_block() -> None:
    """A ``duplexctl`` command in a block of another language would not be run: only the
    blocks :data:`SHOWN_NOT_RUN` names, with why, may hold one."""
    hidden = [
        f"{document}:{f.first_line + i}: {line.strip()}"
        for document in DOCUMENTS
        if document not in SHOWN_NOT_RUN
        for f in fences((ROOT / document).read_text(encoding="utf-8"))
        if f.lang not in ("bash", "sh", "shell")
        for i, line in enumerate(f.lines)
        if line.strip() and _is_duplexctl(line.split()[0])
    ]
    assert hidden == []
    for document in SHOWN_NOT_RUN:  # the exception is still needed, and still says so
        text = (ROOT / document).read_text(encoding="utf-8")
        shown = [f for f in fences(text) if f.lang not in ("bash", "sh", "shell")]
        assert any(_is_duplexctl(w) for f in shown for line in f.lines for w in line.split())


def test_every_guide_is_linked_from_the_readme_and_the_readme_stays_short() -> None:
    """The README is a front page (issue 35: it was 48 KB of reference, findings and
    benchmark tables): what it is, the set-up, the quickstart, an example per command, links."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= README_MAX_BYTES
    for document in DOCUMENTS[1:]:
        assert f"]({document})" in readme, document
    assert "--find-capacity" in readme.split("## The commands")[0]  # the quickstart answers it


def test_the_first_block_is_the_set_up_and_ci_runs_its_test_command() -> None:
    """The README opens with the whole set-up: install + one turn, and the test command;
    .ci/run ends with exactly that test command."""
    first = fences(README.read_text(encoding="utf-8"))[0]
    setup, tests = (line.split("#")[0].strip() for line in first.lines)
    assert setup == "bash install.sh && .venv/bin/duplexctl replay recordings/hello.wav"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1].strip() == tests == ".venv/bin/pytest -q"


def test_extraction_joins_continuations_and_reads_expected_exits() -> None:
    """The extractor on a README of two blocks (the parts the real README may not exercise)."""
    text = "\n".join(
        [
            "```bash",
            "bash install.sh && .venv/bin/duplexctl replay a.wav   # one turn",
            "duplexctl load --sessions 2 \\",
            '               --slo "ttfa_p95<=800ms"   # nothing listens: exit 3',
            "echo not a duplexctl command",
            "```",
            "```toml",
            'name = "x"',
            "```",
        ]
    )
    found = examples(text)
    assert [(e.line, e.argv, e.expected_exit) for e in found] == [
        (2, ("replay", "a.wav"), 0),
        (3, ("load", "--sessions", "2", "--slo", "ttfa_p95<=800ms"), 3),
    ]
    planned = plan(
        Example(0, 1, "", ("load", "--duration", "5m", "--url", "ws://gpu:8000/v1/realtime"), 0)
    )
    assert _option(planned.argv, "--duration") == f"{LOAD_DURATION_S}s"
    assert planned.serve_args == ["--max-sessions", "4"]
    assert {"remote-url", "load-duration"} <= set(planned.applied)
