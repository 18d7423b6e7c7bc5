"""A private PulseAudio sound server for real capture/playback tests on a headless machine.

The kernel on the project's machines has no sound support, so real-device tests play into a
null sink (``vsink``) and record from its monitor (``vsink.monitor``), which PulseAudio makes
the default source. docs/testing.md lists the facts this helper encodes:

1. An idle null sink renders in ~2 s blocks (first capture arrives late, playback starts with an
   underflow storm). A second null sink ``drain`` fed by ``module-loopback`` from
   ``vsink.monitor`` with ``latency_msec=20`` keeps the monitor running in small blocks; we
   still wait ``settle_s`` (~2 s) after start before using it.
2. The daemon runs in the foreground (``--daemonize=no``) with a private ``XDG_RUNTIME_DIR``
   (mode 700) so it never touches a user's session, we poll ``pactl info`` until it answers,
   and we stop it by the PID we started — never by name.
3. PortAudio reads the device list once, at import: callers started after sounddevice was
   imported must re-initialise it (``duplexctl.audio.devices.reinitialize``).

Usable from pytest fixtures and from a shell (``python tests/support/pulse.py`` starts one and prints
the ``PULSE_SERVER`` to export, until Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support.paths import with_parent

SINK = "vsink"
DRAIN = "drain"
MONITOR = f"{SINK}.monitor"
ROOM = "room"  # add_echo_path: the air around a laptop, whose monitor is its microphone

# With -n no default.pa is read: this is the whole configuration. auth-anonymous because the
# socket lives in a mode-700 directory of our own, and a cookie would need a shared $HOME.
CONFIG = f"""\
load-module module-native-protocol-unix auth-anonymous=1
load-module module-null-sink sink_name={SINK} rate=48000 channels=2 sink_properties=device.description=duplexctl-vsink
load-module module-null-sink sink_name={DRAIN} rate=48000 channels=2 sink_properties=device.description=duplexctl-drain
set-default-sink {SINK}
set-default-source {MONITOR}
load-module module-loopback source={MONITOR} sink={DRAIN} latency_msec=20
"""


def pulseaudio_available() -> bool:
    """True when both the daemon and pactl are on PATH (apt: pulseaudio pulseaudio-utils)."""
    return shutil.which("pulseaudio") is not None and shutil.which("pactl") is not None


class PulseStartError(RuntimeError):
    """The daemon exited or did not answer ``pactl info`` in time (see ``log``)."""


@dataclass
class PulseServer:
    """A running private PulseAudio daemon; ``env`` holds the variables clients need."""

    process: subprocess.Popen[bytes]
    runtime_dir: Path
    log_path: Path
    owns_dir: bool = True
    env: dict[str, str] = field(default_factory=dict)

    @property
    def server(self) -> str:
        """The ``PULSE_SERVER`` address of this daemon's native socket."""
        return f"unix:{self.runtime_dir / 'pulse' / 'native'}"

    def pactl(self, *args: str, timeout: float = 5.0) -> str:
        """Run ``pactl`` against this daemon and return its stdout."""
        out = subprocess.run(
            ["pactl", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            timeout=timeout,
            check=True,
        )
        return out.stdout.decode(errors="replace")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the daemon by its PID (SIGKILL after ``timeout``), then remove its dir."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        if self.owns_dir:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)


def start_pulse(
    base_dir: Path | None = None, *, settle_s: float = 2.0, timeout_s: float = 15.0
) -> PulseServer:
    """Start a private daemon and return once ``pactl info`` answers and ``settle_s`` passed.

    Does not change ``os.environ``: callers export ``server.env`` where they need it (the
    pytest fixture uses monkeypatch so the variables go away with the server).
    """
    if not pulseaudio_available():
        raise FileNotFoundError("pulseaudio/pactl not installed (apt-get install pulseaudio)")
    owns = base_dir is None
    runtime = Path(tempfile.mkdtemp(prefix="duplexctl-pulse-")) if base_dir is None else base_dir
    runtime.mkdir(parents=True, exist_ok=True)
    os.chmod(runtime, 0o700)  # PulseAudio refuses a runtime dir others can read
    home = runtime / "home"  # the daemon writes state under $HOME/.config/pulse: keep it private
    home.mkdir(exist_ok=True)
    config = runtime / "duplexctl.pa"
    config.write_text(CONFIG)
    log_path = runtime / "pulseaudio.log"
    env = {
        "XDG_RUNTIME_DIR": str(runtime),
        "PULSE_SERVER": f"unix:{runtime / 'pulse' / 'native'}",
    }
    daemon_env = {
        **os.environ,
        **env,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".state"),
    }
    daemon_env.pop("PULSE_SERVER", None)  # the daemon itself serves, it does not connect
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            with_parent(
                [
                    "pulseaudio",
                    "-n",
                    "-F",
                    str(config),
                    "--daemonize=no",
                    "--exit-idle-time=-1",
                    "--use-pid-file=no",
                    "--log-target=stderr",
                ]
            ),
            env=daemon_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = PulseServer(process, runtime, log_path, owns_dir=owns, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            text = server.log()
            server.stop()
            raise PulseStartError(f"pulseaudio exited with {process.returncode}:\n{text}")
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            server.pactl("info", timeout=2.0)
            break
        if time.monotonic() > deadline:
            text = server.log()
            server.stop()
            raise PulseStartError(f"pulseaudio did not answer pactl info in {timeout_s} s:\n{text}")
        time.sleep(0.1)
    time.sleep(settle_s)  # fact 1: let the loopback pull the monitor into small blocks
    return server


@dataclass(frozen=True)
class EchoPath:
    """A laptop's acoustics (:func:`add_echo_path`): ``{ROOM}.monitor`` is the microphone,
    hearing the speaker ``delay_ms`` late and ``gain_db`` quieter, plus whatever is played
    into ``{ROOM}`` (the user's voice). Streams are routed by ``PULSE_SINK`` /
    ``PULSE_SOURCE``, which libpulse reads when a stream opens (PortAudio sees one ``pulse``
    device, so names cannot be chosen through it)."""

    delay_ms: int
    gain_db: float
    modules: tuple[str, ...] = ()  # what add_echo_path loaded (remove_echo_path unloads them)
    microphone: str = f"{ROOM}.monitor"
    speaker: str = SINK
    voice: str = ROOM


def add_echo_path(
    server: PulseServer, *, delay_ms: int = 50, gain_db: float = -10.0, settle_s: float = 1.5
) -> EchoPath:
    """Feed the speaker sink back into a microphone: ``module-loopback`` from the speaker's
    monitor into a null sink ``room`` with ``latency_msec=delay_ms``, its volume set to
    ``gain_db``; ``room``'s monitor is pulled by a second loopback into ``drain`` so that it
    runs in small blocks (fact 1). Measured on this setup: a 10 ms click comes back -9.3 dB,
    54-64 ms later for ``delay_ms=50`` (the loopback adapts its latency around the target)."""
    room = server.pactl(
        "load-module", "module-null-sink", f"sink_name={ROOM}", "rate=48000", "channels=1",
        "sink_properties=device.description=duplexctl-room",
    ).strip()  # fmt: skip
    drain = server.pactl(
        "load-module", "module-loopback", f"source={ROOM}.monitor", f"sink={DRAIN}",
        "latency_msec=20",
    ).strip()  # fmt: skip
    module = server.pactl(
        "load-module", "module-loopback", f"source={MONITOR}", f"sink={ROOM}",
        f"latency_msec={delay_ms}", "adjust_time=0", "source_dont_move=true",
        "sink_dont_move=true",
    ).strip()  # fmt: skip
    deadline = time.monotonic() + 5.0
    while True:
        for entry in server.pactl("list", "sink-inputs").split("Sink Input #")[1:]:
            if f"Owner Module: {module}\n" in entry:
                server.pactl("set-sink-input-volume", entry.split()[0], f"{gain_db}dB")
                time.sleep(settle_s)  # the new sinks leave their first big blocks behind
                return EchoPath(delay_ms, gain_db, (module, drain, room))
        if time.monotonic() > deadline:
            raise PulseStartError(f"the echo loopback (module {module}) has no sink input")
        time.sleep(0.1)


def remove_echo_path(server: PulseServer, path: EchoPath) -> None:
    """Unload what :func:`add_echo_path` loaded, so the daemon (one per test session) is as
    the next module expects it: the speaker heard by nothing but its own monitor."""
    for module in path.modules:
        server.pactl("unload-module", module)


@contextlib.contextmanager
def running_pulse(settle_s: float = 2.0) -> Iterator[PulseServer]:
    """Context manager form of :func:`start_pulse` (stops the daemon on exit)."""
    server = start_pulse(settle_s=settle_s)
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":  # pragma: no cover - manual use
    with running_pulse() as srv:
        print(f"export XDG_RUNTIME_DIR={srv.runtime_dir} PULSE_SERVER={srv.server}")
        print(f"pid {srv.process.pid}; Ctrl-C stops it", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            srv.process.wait()
