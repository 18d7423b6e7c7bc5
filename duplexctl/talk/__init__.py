"""``duplexctl talk``: a live conversation through a microphone and a speaker.

The package is split by what each part owns, so the live loop stays readable and each part
can be tested on its own:

* :mod:`~duplexctl.talk.config` — the options of one talk run (no heavy imports: the CLI
  builds it before anything touches numpy, websockets or PortAudio).
* :mod:`~duplexctl.talk.inputs` — the user's side: a real microphone, or WAV files fed through
  the same path in real time (``--input-file``), as timestamped blocks.
* :mod:`~duplexctl.talk.output` — the assistant's side: the speaker (the output device drives
  ``played_ms``), or a simulated playback clock when ``--output-device none``.
* :mod:`~duplexctl.talk.barge` — the local barge-in detector that flushes playback at once.
* :mod:`~duplexctl.talk.keys` — non-blocking keys (Enter commits, ``c`` cancels, ``q`` quits).
* :mod:`~duplexctl.talk.view` — the rich live view, or plain lines when stdout is not a TTY.
* :mod:`~duplexctl.talk.session` — the live loop tying them to a DuplexConnection.
"""
