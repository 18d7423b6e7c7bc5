"""Scripted conversations for ``duplexctl replay``: the scenario format, its parser, its runner.

A scenario is a TOML file. Paths are relative to the file. Example (``recordings/barge_in.toml``)::

    name = "barge_in"
    description = "The user talks over the answer; the server must stop it."
    needs_behaviour = ""            # the model behaviour the expectations need, as
                                    # `serve --behaviour` spells it ("backchannel-rate=6"):
                                    # a failure against the embedded reference model, which
                                    # lacks it by default, says so and how to turn it on

    [settings]                      # all optional; --session FILE.json and flags win
    turn_detection = "server_vad"   # or "none" (client commits)
    vad_silence_ms = 800            # server VAD silence that ends a turn
    auto_response = false           # true: the model decides when to answer (native lane)
    commit = false                  # true: client commits even with server VAD
    chunk_ms = 100                  # append size
    pace = "realtime"               # or "fast"
    response_timeout_s = 15
    prebuffer_ms = 100              # simulated playback jitter buffer
    tools = "tools.json"            # the tools the model may call (or [session] tools = […])
    tool_outputs = "outputs.json"   # what each tool answers: {name: output or {output, latency_ms}}
    model = "…"; voice = "…"; instructions = "…"; ref_audio = "voice.wav"

    [session]                       # the opening session.update's object: keys that are
    temperature = 0.7               # settings (model, turn_detection …) rank as [settings];
                                    # the rest is sent as is (duplexctl.resolver)

    [expect]                        # bounds on the whole run (see below)
    drops = 0                       # the server must not drop the connection

    [[step]]
    action = "say"                  # speak a file as the next user turn (does not wait)
    file = "hello.wav"
    # commit = true                 # commit tail_ms (200) after the end of speech
    expect = { outcome = "spoke", ttfa_ms = "<2000" }

    [[step]]
    action = "barge_in"             # speak over the answer, after_ms after its first audio
    file = "interrupt.wav"
    after_ms = 600                  # anchor = "first_audio" (default) or "start" (of the step)
    # interrupt = "speech" | "barge_in" | "cancel"   (default: speech with server VAD,
    #                                 else barge_in if supported, else cancel)
    expect = { outcome = "cancelled", reason = ["turn_detected", "barge_in"], cancel_ack_ms = "<1500" }

    [[step]]
    action = "wait"                 # wait for the latest turn's answer to end (and play out)
    timeout_s = 15

Actions and their keys (``expect`` is allowed on every step):

=========== ==================================================================================
``say``      ``file`` (required), ``commit`` (bool), ``tail_ms`` (200)
``silence``  ``ms`` (required): let the microphone run with silence
``wait``     ``timeout_s`` (default: the run's response timeout); timeout ⇒ ``no_response``,
             an error of the run (exit 1) unless the answer had ended and is still playing
``barge_in`` ``file``, ``after_ms`` (500), ``anchor``, ``interrupt``, ``commit``, ``tail_ms``
``cancel``   ``after_ms`` (500), ``anchor``: send ``response.cancel``
``drop``     ``after_ms`` (500), ``anchor``, ``resume_after_ms`` (500): kill the socket, resume
``commit``   ``response_create`` (true): send ``input_audio_buffer.commit`` now
``tool_output`` ``output`` (a string, or a table sent as JSON; default: the ``--tool-outputs``
             entry of the tool called), ``name``, ``latency_ms``, ``timeout_s``: answer the
             model's next tool call of the latest turn (docs/protocol.md §13.4)
=========== ==================================================================================

``expect`` bounds a figure of the turn the step concerns (``say``: the turn it starts;
``wait``: the turn it waits for; ``barge_in``/``cancel``/``drop``: the turn whose answer it
interrupts): ``outcome`` / ``status`` / ``reason`` take a string or a list (any of); figures
(``ttfa_ms``, ``cancel_ack_ms``, ``seq_gaps``, … see ``duplexctl.report.turns.ORIGINS``)
take a number (equality), ``"<N"``, ``"<=N"``, ``">N"``, ``">=N"``, ``"==N"``, ``"!=N"`` or
``"A..B"``; ``chunk_gap_ms`` compares its max; ``drops`` / ``resumes`` (connections lost
while the turn was in flight, scripted or the server's own) are 0 on a turn without any.
The top-level ``[expect]`` table bounds the whole run with the same syntax: ``drops``,
``resumes``, ``resume_failures``, ``resume_ms`` (the slowest) and ``unanswered_turns``
(``duplexctl.report.turns.RUN_ORIGINS``). Expectations of steps a stopped run never
finished are reported as not reached, not as failures. A list of WAV files instead of a
scenario is ``say`` + ``wait`` per file.
"""

from duplexctl.scenario.model import Scenario
from duplexctl.scenario.parse import load_inputs, load_scenario, parse_scenario

__all__ = ["Scenario", "load_inputs", "load_scenario", "parse_scenario"]
