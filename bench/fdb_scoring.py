"""Full-Duplex-Bench's own evaluation scripts, run unchanged on ``replay --out``'s export.

Does ``DIR/full_duplex_bench/`` (``duplexctl/behaviour/fdb.py``) read as Full-Duplex-Bench
(FDB v1/v1.5) expects, and do FDB's scores say what duplexctl's ``behaviour`` figures say?
The truth is known: a ``duplexctl serve --voice echo`` on loopback (the reply is the user's
own utterance played back, so there is speech to transcribe) behaves as ``--behaviour``
tells it (docs/metrics.md "Known behaviour"), and ``replay --out`` runs a scenario against
it per setting:

* ``takeover=1`` / ``takeover=0``: ``takeover-on-pause=1`` / ``0`` on a pause scenario
  written here (``hello.wav`` / ``followup.wav`` with three 2.5 s pauses, server VAD silence
  3 s): FDB pause handling's TOR against ``takeover_rate``. (The bundled ``pause.toml``
  does not do for this: its turns are one "Okay." each, so an echoed takeover is under 1 s
  of speech and neither FDB nor duplexctl counts it.)
* ``gap=800`` / ``gap=1500``: ``response-gap-ms`` on ``turn_taking.toml``: FDB smooth
  turn-taking's TOR and latency against ``1 - no_response_rate`` and the mean of
  ``trials.response_gaps_ms``.
* ``interrupt``: ``stop-latency-ms=300,response-gap-ms=800`` on ``interruption.toml``: FDB
  user interruption's TOR and latency (FDB v1's latency is from the *end* of the
  interruption to the model's next words, i.e. duplexctl's response gap of the interrupting
  turn, not its ``stop_latency_ms``).

FDB's transcript step (``get_transcript/asr.py``) needs NVIDIA Parakeet's weights from
Hugging Face; here the ``asr`` subcommand of this file does it with PocketSphinx (its PyPI
wheel ships a US-English model), run under ``--python`` (a separate venv: ``pip install
pocketsphinx soundfile numpy openai python-dotenv tqdm``; none is a duplexctl dependency),
and writes exactly asr.py's ``output.json``: ``{"text": "w1 w2 ...", "chunks": [{"text": w,
"timestamp": [start_s, end_s]}, ...]}``, words only, seconds from the start of
``output.wav``; for ``user_interruption`` the audio is cut at the interruption's end
(``interrupt.json`` ``timestamp[1]``) and that offset added back, as asr.py does.
Deviations: lower-case words without punctuation, PocketSphinx's fillers (``<s>``,
``<sil>``, ``[NOISE]``) dropped and its alternate pronunciations (``the(2)``) named as the
word; times on its 10 ms frames. The speech is espeak-ng's, which PocketSphinx mostly
mis-hears: the words are wrong, their times are what FDB's timing metrics read.

Then FDB's ``evaluation/evaluate.py --task TASK --root_dir ROOT`` runs unchanged under
``--python``, from FDB's ``evaluation/`` folder. ``user_interruption`` asks OpenAI
(``gpt-4-turbo``) for a relevance rating: the ``openai`` client is pointed at a loopback
stub (``OPENAI_BASE_URL``) that rates every answer 0, so its TOR and latency are FDB's own
and its rating means nothing. Not run: ``backchannel`` (needs FDB's ICC ground-truth
distribution of real dialogues), ``behavior`` (OpenAI), ``general_before_after`` (UTMOSv2
and Silero weights from hubs), ``get_timing.py`` (Silero via ``torch.hub``).

Printed: every setting's FDB score beside duplexctl's figure and the truth, and per sample
the ASR's first word against the onset duplexctl's own voice-activity detector finds in the
same ``output.wav`` after the same instant (what any gap is made of).

    .venv/bin/python bench/fdb_scoring.py --fdb FDB_CHECKOUT --python FDB_VENV/bin/python \\
        --out RUN_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from glob import glob
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: (name, scenario: a bundled file or "pause_long" (written here), --behaviour, truth)
SETTINGS: list[tuple[str, str, str, dict[str, float]]] = [
    ("takeover=1", "pause_long", "takeover-on-pause=1", {"takeover_rate": 1.0}),
    ("takeover=0", "pause_long", "takeover-on-pause=0", {"takeover_rate": 0.0}),
    ("gap=800", "turn_taking.toml", "response-gap-ms=800", {"response_gap_ms": 800.0}),
    ("gap=1500", "turn_taking.toml", "response-gap-ms=1500", {"response_gap_ms": 1500.0}),
    (
        "interrupt",
        "interruption.toml",
        "stop-latency-ms=300,response-gap-ms=800",
        {"stop_latency_ms": 300.0, "response_gap_ms": 800.0},
    ),
]

PAUSE_MS, PAUSE_SILENCE_MS = 2500, 3000

#: what FDB's ``evaluate.py`` prints, per task, and the name shown for it
RESULT_LINES = {
    "Average take turn": "TOR",
    "Average latency": "latency_s",
    "Average rating": "rating (stub)",
}

STUB_REPLY = "Analysis: not rated (loopback stub, no OpenAI).\nI would rate the AI's response as 0."


# --- the transcript step (runs under --python: pocketsphinx, soundfile, numpy only) ------


def _words(wave: Any, rate: int) -> list[tuple[str, float, float]]:
    import numpy as np
    from pocketsphinx import Decoder

    pcm = (np.clip(wave, -1.0, 1.0) * 32767.0).astype("<i2")
    # dither: the export's digital silence (exact zeros) otherwise upsets the front end's
    # normalisation and the words that follow it lose their ends; seeded, so reproducible
    decoder = Decoder(samprate=rate, dither=True, seed=1, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), full_utt=True)
    decoder.end_utt()
    frame_s = 1.0 / decoder.config["frate"]
    return [
        (seg.word.split("(")[0], seg.start_frame * frame_s, (seg.end_frame + 1) * frame_s)
        for seg in decoder.seg()
        if not seg.word.startswith(("<", "["))
    ]


def transcribe(root_dir: str, task: str) -> None:
    """asr.py's ``get_time_aligned_transcription`` with PocketSphinx for Parakeet."""
    import soundfile as sf

    for audio_path in sorted(glob(f"{root_dir}/*/output.wav")):
        waveform, sr = sf.read(audio_path)
        if waveform.ndim > 1:
            waveform = waveform.mean(axis=1)
        offset = 0.0
        if task == "user_interruption":
            meta_path = audio_path.replace("output.wav", "interrupt.json")
            with open(meta_path, encoding="utf-8") as f:
                _, offset = json.load(f)[0]["timestamp"]
            waveform = waveform[int(offset * sr) :]
        chunks = [
            {"text": word, "timestamp": [start + offset, end + offset]}
            for word, start, end in _words(waveform, sr)
        ]
        output = {"text": " ".join(c["text"] for c in chunks), "chunks": chunks}
        with open(audio_path.replace("output.wav", "output.json"), "w", encoding="utf-8") as f:
            json.dump(output, f, indent=4)


# --- the driver (runs under duplexctl's interpreter) --------------------------------------


def _pause_scenario(path: Path) -> Path:
    from duplexctl.audio.manifest import DEFAULT_DIR

    files = ["hello.wav", "followup.wav", "hello.wav", "followup.wav"]
    steps = [f'[[step]]\naction = "say"\nfile = "{DEFAULT_DIR / files[0]}"\n']
    steps += [
        f'[[step]]\naction = "pause"\nms = {PAUSE_MS}\nfile = "{DEFAULT_DIR / f}"\n'
        for f in files[1:]
    ]
    # after a takeover the latest answer is the takeover's: stay for the real end's answer
    steps += ['[[step]]\naction = "wait"\n', '[[step]]\naction = "silence"\nms = 5000\n']
    steps += ['[[step]]\naction = "wait"\n']
    head = (
        'name = "pause_long"\n[settings]\nturn_detection = "server_vad"\n'
        f"vad_silence_ms = {PAUSE_SILENCE_MS}\n"
    )
    path.write_text(head + "\n".join(steps), encoding="utf-8")
    return path


class _OpenAIStub(BaseHTTPRequestHandler):
    """``/v1/models`` and ``/v1/chat/completions`` on loopback: every answer rated 0."""

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": []})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {"role": "assistant", "content": STUB_REPLY}
        self._send(
            {
                "id": "stub",
                "object": "chat.completion",
                "created": 0,
                "model": "stub",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _openai_stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def _fdb_eval_dir(fdb: Path) -> Path:
    for candidate in (fdb / "v1_v1.5" / "evaluation", fdb / "evaluation"):
        if (candidate / "evaluate.py").is_file():
            return candidate
    raise SystemExit(f"no evaluation/evaluate.py under {fdb} (a Full-Duplex-Bench checkout)")


def _evaluate(python: str, eval_dir: Path, task: str, root: Path, log: Path) -> dict[str, float]:
    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        if task == "user_interruption":
            env["OPENAI_BASE_URL"] = stack.enter_context(_openai_stub())
            env["OPENAI_API_KEY"] = "stub"
        cmd = [python, "evaluate.py", "--task", task, "--root_dir", str(root.resolve())]
        done = subprocess.run(
            cmd, cwd=eval_dir, env=env, capture_output=True, text=True, timeout=600, check=False
        )
    log.write_text(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}", encoding="utf-8")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        print(f"  FDB evaluate.py --task {task} failed ({done.returncode}): {tail[0]}")
        return {"failed": float(done.returncode)}
    scores = {}
    for label, name in RESULT_LINES.items():
        found = re.search(rf"^{label}:\s+(\S+)", done.stdout, re.MULTILINE)
        if found:
            scores[name] = float(found.group(1))
    return scores


def _per_sample(task_dir: Path, task: str) -> list[str]:
    """Per sample, what FDB reads: its reference instant (the user's turn end, the end of the
    interruption; none for pause handling) and the ASR's words (the first one's start and
    their span: FDB's take-turn needs 1 s or more than 3 words); beside them, duplexctl's
    own detector on the same output.wav: the first voice onset (after the reference) and
    how much voice there is."""
    import soundfile as sf

    from duplexctl.behaviour.activity import voice_activity

    meta_name = {
        "pause_handling": "pause.json",
        "smooth_turn_taking": "turn_taking.json",
        "user_interruption": "interrupt.json",
    }[task]
    rows = []
    for folder in sorted(task_dir.iterdir(), key=lambda p: int(p.name)):
        stamp = json.loads((folder / meta_name).read_text())[0]["timestamp"]
        ref = {"pause_handling": 0.0, "smooth_turn_taking": stamp[0]}.get(task, stamp[1])
        words = json.loads((folder / "output.json").read_text())["chunks"]
        wave, rate = sf.read(str(folder / "output.wav"), dtype="float32")
        after = ref if task == "user_interruption" else 0.0  # what asr.py keeps
        voiced = [s for s in voice_activity(wave, rate) if s.end_ms / 1000.0 > after]
        asr = f"{words[0]['timestamp'][0]:.2f}" if words else "-"
        span = f"{words[-1]['timestamp'][1] - words[0]['timestamp'][0]:.2f}" if words else "-"
        vad = f"{max(after, voiced[0].start_ms / 1000.0):.2f}" if voiced else "-"
        voiced_s = sum(s.end_ms - max(s.start_ms, 1000 * after) for s in voiced) / 1000.0
        rows.append(
            f"    {folder.name:>2}  ref {ref:5.2f} s  ASR: first word {asr:>5}, {len(words):2} words"
            f" over {span:>4} s  |  activity: onset {vad:>5}, voice {voiced_s:.2f} s"
        )
    return rows


def _duplexctl_figures(task: str, b: dict[str, Any]) -> dict[str, float]:
    gaps = b["trials"]["response_gaps_ms"]
    if task == "pause_handling":
        return {"TOR": b.get("takeover_rate", float("nan"))}
    if task == "smooth_turn_taking":
        return {
            "TOR": 1.0 - b.get("no_response_rate", float("nan")),
            "latency_s": sum(gaps) / len(gaps) / 1000.0 if gaps else float("nan"),
        }
    # user interruption: the interrupting turn is the last turn of interruption.toml
    return {
        "TOR": 1.0 if gaps else 0.0,
        "latency_s": gaps[-1] / 1000.0 if gaps else float("nan"),
        "stop_latency_s": b.get("stop_latency_ms", float("nan")) / 1000.0,
    }


def run_setting(
    name: str, scenario: str, behaviour: str, out: Path, python: str, eval_dir: Path
) -> list[tuple[str, str, str, float | None, float | None]]:
    from duplexctl.audio.manifest import DEFAULT_DIR

    run_dir = out / name
    scenario_path = (
        _pause_scenario(out / "pause_long.toml")
        if scenario == "pause_long"
        else DEFAULT_DIR / scenario
    )
    from bench.serve_process import serve

    serve_args = ["--voice", "echo", "--ttfa-ms", "100", "--behaviour", behaviour]
    with serve(serve_args, out / f"serve_{name}.log") as server:
        cmd = [sys.executable, "-m", "duplexctl", "replay", str(scenario_path)]
        cmd += ["--url", server.url]
        cmd += ["--turn-detection", "server_vad", "--prebuffer-ms", "0", "--out", str(run_dir)]
        cmd += ["--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if not (run_dir / "report.json").is_file():
        raise SystemExit(f"replay wrote no report ({done.returncode}): {done.stderr[-500:]}")
    behaviour_figures = json.loads((run_dir / "report.json").read_text())["behaviour"]
    print(f"\n[{name}] serve --voice echo --behaviour {behaviour}; replay {scenario_path.name}")
    rows = []
    for task_dir in sorted((run_dir / "full_duplex_bench").iterdir()):
        task = task_dir.name
        asr_args = ["--task", "user_interruption" if task == "user_interruption" else "default"]
        subprocess.run(
            [python, str(Path(__file__).resolve()), "asr", "--root_dir", str(task_dir), *asr_args],
            check=True,
            timeout=600,
        )
        fdb = _evaluate(python, eval_dir, task, task_dir, run_dir / f"fdb_{task}.log")
        ours = _duplexctl_figures(task, behaviour_figures)
        print(f"  {task}: FDB {fdb}  duplexctl {ours}")
        print("\n".join(_per_sample(task_dir, task)))
        for metric in sorted(set(fdb) | set(ours)):
            rows.append((name, task, metric, fdb.get(metric), ours.get(metric)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    asr = sub.add_parser("asr", help="asr.py's transcript step with PocketSphinx (--python)")
    asr.add_argument("--root_dir", required=True)
    asr.add_argument("--task", default="default", choices=["default", "user_interruption"])
    parser.add_argument("--fdb", type=Path, help="a Full-Duplex-Bench checkout")
    parser.add_argument("--python", help="the interpreter of a venv with pocketsphinx etc.")
    parser.add_argument("--out", type=Path, help="where the runs are written (new or empty)")
    parser.add_argument("--only", action="append", help="run only these settings (repeatable)")
    args = parser.parse_args()
    if args.command == "asr":
        transcribe(args.root_dir, args.task)
        return
    if not (args.fdb and args.python and args.out):
        parser.error("--fdb, --python and --out are required")
    sys.path.insert(0, str(ROOT))
    eval_dir = _fdb_eval_dir(args.fdb)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    commit = subprocess.run(
        ["git", "-C", str(args.fdb), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"FDB: {eval_dir} {commit or '(no git)'}")
    rows = []
    for name, scenario, behaviour, truth in SETTINGS:
        if args.only and name not in args.only:
            continue
        for row in run_setting(name, scenario, behaviour, args.out, args.python, eval_dir):
            rows.append((*row, truth))
    print(f"\n{'setting':11} {'FDB task':19} {'metric':14} {'FDB':>7} {'duplexctl':>9}  truth")
    for name, task, metric, fdb, ours, truth in rows:
        f = "-" if fdb is None else f"{fdb:.3f}"
        o = "-" if ours is None else f"{ours:.3f}"
        if metric == "failed":  # FDB's evaluate.py exited with an error: its log says why
            f, o = f"exit {fdb:g}", "-"
        t = ", ".join(f"{k}={v:g}" for k, v in truth.items())
        print(f"{name:11} {task:19} {metric:14} {f:>7} {o:>9}  {t}")


if __name__ == "__main__":
    main()
