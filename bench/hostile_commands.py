"""What ``replay``, ``probe`` and ``load`` do against each hostile server (issue 17.2).

Runs each command as a user would (``python -m duplexctl …``, its own process) against each
server of tests/support/hostile_servers.py on loopback, and prints per run: exit code, wall time, whether a
traceback (or "Task exception was never retrieved") reached stderr, and the last stderr line.

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

from support.hostile_servers import CLIP, hostile  # noqa: E402

KINDS = (
    "hang,garbage_text,garbage_binary,garbage_array,drop_after_upgrade,close_after_upgrade,"
    "plain_http,http_404,silent_tcp,tls_silent,not_http,nothing"
)
CRASH_SIGNS = ("Traceback", "exception was never retrieved", "Fatal error")


def command(name: str, url: str, out: str, duration: str, workers: int) -> list[str]:
    if name == "replay":
        return ["replay", str(CLIP), "--url", url, "--out", out]
    if name == "probe":
        return ["probe", "--url", url]
    return ["load", "--url", url, "--duration", duration, "--sessions", "2", "--workers",
            str(workers), "--plain"]  # fmt: skip


async def run(name: str, kind: str, args: argparse.Namespace) -> None:
    server_kind = "silent_tcp" if kind == "tls_silent" else kind
    async with hostile(server_kind) as server:
        url = server.url.replace("ws://", "wss://") if kind == "tls_silent" else server.url
        with tempfile.TemporaryDirectory() as tmp:
            argv = command(name, url, str(Path(tmp) / "run"), args.duration, args.workers)
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "duplexctl", *argv,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
            )  # fmt: skip
            try:
                _, err = await asyncio.wait_for(proc.communicate(), args.bound)
                code = str(proc.returncode)
            except TimeoutError:
                proc.kill()
                _, err = await proc.communicate()
                code = "HANG"
            took = time.monotonic() - t0
            text = err.decode(errors="replace")
            crashed = any(sign in text for sign in CRASH_SIGNS)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            last = lines[-1][:140] if lines else ""
            print(
                f"{name:6} {kind:19} rc={code:4} {took:5.1f}s traceback={crashed!s:5} | {last}",
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
