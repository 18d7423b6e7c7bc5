"""N real-time sessions driven by vLLM-Omni's own ``DuplexClient``: the reference client.

``duplexctl load`` claims to be cheap per session and exact in its timings; the honest way to
check is to drive the *same* sessions with the client vLLM-Omni ships and uses in its own
benchmarks, and measure it the same way. So each session here does what a ``load`` session
does with one WAV and client commits: it streams the WAV in ``--chunk-ms`` appends on an
**absolute schedule** (``t0 + k * chunk``, never "send then sleep", which drifts and would
flatter the client), sends ``input_audio_buffer.commit`` right after the append that reaches
``speech_end + tail``, keeps streaming silence while the answer plays, and starts the WAV
again once the answer is done and its audio has played out. An application-style consumer
drains ``client.responses()`` / ``response.audio()`` as a real caller would, acking each
chunk as it plays (``DuplexClient``'s documented playback contract).

Timings are the ones vLLM-Omni itself would report: an ``EventCollector`` is attached to
every session and, per answered turn, ``EventCollector.timing_summary(input_committed_at_s=
<send of commit>)`` gives ``response_created_to_first_audio_ms`` and
``commit_to_first_audio_ms`` (``audio_output`` block). The driver also measures its own send
lag (actual send return − scheduled time, per append) and its own CPU.

It runs under the peer venv's Python (vLLM-Omni installed there), never imports duplexctl,
and prints one JSON object on the last stdout line::

    ~/.cache/duplexctl-peer-venv/bin/python bench/duplexclient_driver.py \
        --url 'ws://127.0.0.1:8765/v1/realtime?duplex=1' --sessions 50 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _import_client_without_server_stack() -> None:
    """Make ``vllm_omni.clients.duplex`` importable without ``vllm_omni/__init__``.

    The package's ``__init__`` imports vLLM, torch and torchvision (5 s and ~1 GB, and it
    crashes on a CPU-only torch without the peer's shims), while the client module and its
    ``utils`` are dependency-free by design. Registering bare package objects whose
    ``__path__`` points at the installed folders loads exactly the client's code, so the
    CPU measured is the client's and start-up is not dominated by torch.
    """
    import importlib.util
    import sys
    import types

    spec = importlib.util.find_spec("vllm_omni")  # locates, does not execute
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm_omni is not installed in this Python (use the peer venv)")
    base = Path(next(iter(spec.submodule_search_locations)))
    for name, path in (("vllm_omni", base), ("vllm_omni.clients", base / "clients")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module


_import_client_without_server_stack()

from phase_grid import phase_start  # noqa: E402  (a script: bench/ is on the path)
from vllm_omni.clients.duplex import (  # noqa: E402
    AudioFormat,
    DuplexClient,
    DuplexClientError,
    EventCollector,
    SessionConfig,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WAV = ROOT / "recordings" / "hello.wav"
RATE = 16000
BYTES_PER_MS = RATE * 2 // 1000
#: Longest wait for an answer before the turn is abandoned (load's --response-timeout).
RESPONSE_TIMEOUT_S = 20.0


def read_wav(path: Path) -> bytes:
    """16 kHz mono PCM16 bytes of ``path`` (the recordings are already in that format)."""
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (RATE, 1, 2):
            raise SystemExit(f"{path}: needs 16 kHz mono PCM16")
        return wav.readframes(wav.getnframes())


def speech_end_ms(path: Path) -> float:
    """End of speech from the recordings' manifest (the same ``t_eos`` duplexctl uses)."""
    manifest = json.loads((path.parent / "manifest.json").read_text())
    return float(manifest["files"][path.name]["speech_end_ms"])


@dataclass
class Turn:
    """One user turn: when its commit went out and which response answered it."""

    t_commit: float
    response_id: str | None = None
    done_at: float | None = None  # answer played out and acknowledged


@dataclass
class SessionResult:
    admitted: bool = False
    error: str | None = None
    appends: int = 0
    send_lag_ms: list[float] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    turns_cut: int = 0


async def run_session(
    url: str,
    pcm: bytes,
    commit_at_ms: float,
    duration_s: float,
    chunk_ms: int,
    start_at: float,
    phase: tuple[int, int] | None = None,
) -> SessionResult:
    """One session: stream, commit, wait for the answer to play out, repeat until duration."""
    result = SessionResult()
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    config = SessionConfig(
        input_audio=AudioFormat("pcm16", RATE),
        output_audio=AudioFormat("pcm16", 24000),
        auto_response=False,
        turn_detection=None,
    )
    collector = EventCollector()
    turns: list[Turn] = []
    try:
        async with DuplexClient(url, model="duplexctl-sim", config=config) as client:
            result.admitted = True
            consume = asyncio.create_task(collector.consume(client))

            async def drain_responses() -> None:
                """What an application does, as ``DuplexClient``'s own docstring shows it: take
                each chunk of an answer, play it, ``ack_playback(response.played_ms)``. Play is
                a blocking real-time player here (it returns when the chunk has played out),
                so one ack per chunk goes out on the playback clock — the same traffic as
                ``duplexctl load``'s acks every 200 ms played (the server forces
                ``ack_only``: an unacked answer keeps the turn)."""
                with contextlib.suppress(DuplexClientError):
                    async for response in client.responses():
                        if response.decision == "listen":
                            continue  # a listen beat on silence, not the answer to a commit
                        turn = next((t for t in turns if t.response_id is None), None)
                        if turn is not None:
                            turn.response_id = response.response_id
                        first_at: float | None = None
                        async for _chunk in response.audio():
                            if first_at is None:
                                first_at = time.monotonic()
                            end = first_at + response.played_ms / 1000
                            await asyncio.sleep(max(0.0, end - time.monotonic()))
                            await client.ack_playback(
                                response.played_ms, response_id=response.response_id
                            )
                        if turn is not None:
                            turn.done_at = time.monotonic()

            drainer = asyncio.create_task(drain_responses())
            step = BYTES_PER_MS * chunk_ms
            silence = bytes(step)
            period = chunk_ms / 1000
            n_chunks = int(duration_s / period)
            offset = 0  # byte offset in the WAV; len(pcm) = WAV over, waiting for the answer
            committed = False
            # time.monotonic, not loop.time(): uvloop's clock has 1 ms resolution
            t0 = time.monotonic()
            if phase is not None:
                t0 = phase_start(t0, phase[0], phase[1], period)
            for k in range(n_chunks):
                due = t0 + k * period
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if offset < len(pcm):
                    chunk = pcm[offset : offset + step]
                    chunk += silence[: step - len(chunk)]
                    offset += step
                else:
                    chunk = silence
                await client.append_audio(chunk)
                result.send_lag_ms.append(1000 * (time.monotonic() - due))
                result.appends += 1
                if not committed and offset >= commit_at_ms * BYTES_PER_MS:
                    await client.commit(create_response=True)
                    turns.append(Turn(t_commit=time.monotonic()))
                    committed = True
                if committed and offset >= len(pcm):
                    last = turns[-1]
                    if last.done_at is not None or time.monotonic() - last.t_commit > (
                        RESPONSE_TIMEOUT_S
                    ):
                        offset, committed = 0, False  # the next turn
            await client.close(timeout_s=10)
            drainer.cancel()
            consume.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(drainer, consume)
    except Exception as exc:  # a benchmark counts failures, it does not stop
        result.error = f"{type(exc).__name__}: {exc}"
    for turn in turns:
        if turn.response_id is None or turn.done_at is None:
            result.turns_cut += 1
            continue
        summary = collector.timing_summary(
            after_s=turn.t_commit,
            input_committed_at_s=turn.t_commit,
            response_id=turn.response_id,
        )
        out = summary.get("audio_output") or {}
        result.turns.append(
            {
                "response_created_to_first_audio_ms": out.get("response_created_to_first_audio_ms"),
                "commit_to_first_audio_ms": out.get("commit_to_first_audio_ms"),
                "chunk_count": out.get("chunk_count"),
            }
        )
    return result


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no data)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    pcm = read_wav(args.wav)
    commit_at = speech_end_ms(args.wav) + args.tail_ms
    t = time.monotonic() + 0.1
    tasks = [
        run_session(
            args.url,
            pcm,
            commit_at,
            args.duration,
            args.chunk_ms,
            t + args.ramp * i / args.sessions,
            None if args.phases is None else (i, args.phases),
        )
        for i in range(args.sessions)
    ]
    wall0, cpu0 = time.monotonic(), _cpu_s()
    results = await asyncio.gather(*tasks)
    wall, cpu = time.monotonic() - wall0, _cpu_s() - cpu0
    lags = [x for r in results for x in r.send_lag_ms]
    turns = [t for r in results for t in r.turns]
    created = [t["response_created_to_first_audio_ms"] for t in turns]
    commit = [t["commit_to_first_audio_ms"] for t in turns]
    created = [float(x) for x in created if x is not None]
    commit = [float(x) for x in commit if x is not None]
    errors = [r.error for r in results if r.error]
    if args.turns_out:
        with open(args.turns_out, "w") as fh:
            for turn in turns:
                fh.write(json.dumps(turn) + "\n")
    return {
        "client": "vllm_omni.clients.duplex.DuplexClient",
        "sessions": args.sessions,
        "admitted": sum(r.admitted for r in results),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "appends": len(lags),
        "send_lag_p50_ms": pct(lags, 50),
        "send_lag_p99_ms": pct(lags, 99),
        "send_lag_max_ms": max(lags) if lags else None,
        "turns": len(turns),
        "turns_cut": sum(r.turns_cut for r in results),
        "created_to_first_audio_p50_ms": statistics.median(created) if created else None,
        "commit_to_first_audio_p50_ms": statistics.median(commit) if commit else None,
        "created_to_first_audio_ms": created if args.raw else None,
        "commit_to_first_audio_ms": commit if args.raw else None,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
    }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of streaming")
    parser.add_argument("--chunk-ms", type=int, default=100)
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds to start all sessions")
    parser.add_argument("--tail-ms", type=float, default=200.0, help="commit after speech end")
    parser.add_argument("--wav", type=Path, default=DEFAULT_WAV)
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument(
        "--phases", type=int, help="start each schedule on one of N send phases (as load does)"
    )
    parser.add_argument("--raw", action="store_true", help="include every turn's timings")
    parser.add_argument("--turns-out", type=Path, help="write per-turn timings (JSONL)")
    args = parser.parse_args()
    if not args.url.startswith(("ws://127.", "ws://localhost", "ws://[::1]")):
        raise SystemExit("benchmarks only send traffic to loopback")
    if args.uvloop:
        import uvloop

        result = uvloop.run(run(args))
    else:
        result = asyncio.run(run(args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
