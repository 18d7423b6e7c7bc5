"""What ``replay``, ``probe`` and ``load`` do against each hostile server (issue 17.2).

Runs each command as a user would (``python -m duplexctl …``, its own process) against each
server of tests/support/hostile_servers.py on loopback, and prints per run: exit code, wall time, whether a
traceback (or "Task exception was never retrieved") reached stderr, how many raw control
characters reached stdout and stderr (issue 31.1), and the last stderr line. Besides the
servers that fail the open, two duplex servers that open: ``planted`` puts terminal escape
sequences in every string a client shows, ``ending`` keeps ending connections (TCP dropped
after two frames of every connection, ``session.close`` answered by a drop).

    python bench/hostile_commands.py --commands replay,probe,load --duration 5s
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the hostile servers the test suite uses

from support.hostile_servers import CLIP, PLANTED, Script, hostile  # noqa: E402

KINDS = (
    "hang,garbage_text,garbage_binary,garbage_array,drop_after_upgrade,close_after_upgrade,"
    "plain_http,http_404,silent_tcp,tls_silent,not_http,nothing,planted,ending"
)
#: the duplex servers that open, and how they misbehave
SCRIPTS = {"planted": Script(plant=PLANTED), "ending": Script(drop_every=2, on_close="drop")}


def raw_controls(data: bytes) -> int:
    """Control characters other than newline and tab (C0, DEL, C1 as UTF-8) in ``data``."""
    text = data.decode("utf-8", errors="replace")
    return sum((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in text)


CRASH_SIGNS = ("Traceback", "exception was never retrieved", "Fatal error")


def command(name: str, url: str, out: str, duration: str, workers: int) -> list[str]:
    if name == "replay":
        return ["replay", str(CLIP), "--url", url, "--out", out, "--turn-detection", "none",
                "--response-timeout-s", "5"]  # fmt: skip
    if name == "probe":
        return ["probe", "--url", url]
    return ["load", "--url", url, "--duration", duration, "--sessions", "2", "--workers",
            str(workers), "--plain"]  # fmt: skip


async def run(name: str, kind: str, args: argparse.Namespace) -> None:
    server_kind = "silent_tcp" if kind == "tls_silent" else kind
    script = SCRIPTS.get(kind)
    if script is not None:
        server_kind = "duplex"
    async with hostile(server_kind, script=script) as server:
        url = server.url.replace("ws://", "wss://") if kind == "tls_silent" else server.url
        with tempfile.TemporaryDirectory() as tmp:
            argv = command(name, url, str(Path(tmp) / "run"), args.duration, args.workers)
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "duplexctl", *argv,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(proc.communicate(), args.bound)
                code = str(proc.returncode)
            except TimeoutError:
                proc.kill()
                out, err = await proc.communicate()
                code = "HANG"
            took = time.monotonic() - t0
            text = err.decode(errors="replace")
            crashed = any(sign in text for sign in CRASH_SIGNS)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            last = lines[-1][:140] if lines else ""
            controls = raw_controls(out + err)
            print(
                f"{name:6} {kind:19} rc={code:4} {took:5.1f}s traceback={crashed!s:5} "
                f"controls={controls} | {last}",
                flush=True,
            )


async def main(args: argparse.Namespace) -> None:
    for name in args.commands.split(","):
        for kind in args.kinds.split(","):
            await run(name, kind, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", default="replay,probe,load")
    parser.add_argument("--kinds", default=KINDS)
    parser.add_argument("--duration", default="5s", help="load --duration")
    parser.add_argument("--workers", type=int, default=2, help="load --workers")
    parser.add_argument("--bound", type=float, default=180.0, help="a run still going: HANG")
    asyncio.run(main(parser.parse_args()))
