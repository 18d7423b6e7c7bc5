"""Which server a command talks to, and how it trusts it — decided here, once (issue 17.5).

Every client command (``replay``, ``load``, ``talk``, ``probe``) goes through this module:

* :func:`parse_url` reads the user's ``--url``: ``ws://`` and ``wss://``, and ``http://`` /
  ``https://`` taken as ``ws://`` / ``wss://`` (what a user copies from a server's banner);
  a URL with no path gets the duplex endpoint ``/v1/realtime?duplex=1`` (docs/protocol.md
  §1.1) — said in one line, since a host-only URL otherwise meets an HTTP 404 with no hint.
  Anything else (no scheme, another scheme, no host, a bad port, spaces, a fragment) is
  :class:`~duplexctl.errors.BadInput`, exit 2, in every command. Other paths are kept as
  typed: a proxy may serve the endpoint elsewhere (a 404 then says which path duplex
  servers serve).
* :class:`TlsPolicy` is how ``wss://`` servers are verified: the system trust store by
  default, ``--ca-file PEM`` to trust a private CA, ``--insecure`` to skip verification
  (a loud warning every run: anyone on the path can then impersonate the server).
  :func:`use_tls` installs it for the whole process at the command line boundary — the four
  commands open connections deep inside code that has no reason to carry it (runners,
  probes), and trust is by nature per process, like the trust store itself. ``load``'s
  worker processes and Ray actors get it in their configuration and install it there (the
  environment does not reach a Ray actor). ``DUPLEXCTL_CA_FILE`` / ``DUPLEXCTL_INSECURE``
  are the options' own variables, read when nothing installed a policy.
* :func:`server_target` is the one place that decides "the embedded reference server, or the
  ``--url``": an async context manager yielding a :class:`Target` (the URL to connect to and
  the line that says which).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

from duplexctl.errors import BadInput

if TYPE_CHECKING:
    from duplexctl.server.config import ServerConfig

#: The duplex endpoint a host-only URL is given (docs/protocol.md §1.1, §1.2).
DUPLEX_PATH: Final = "/v1/realtime"
DUPLEX_QUERY: Final = "duplex=1"
EXAMPLE: Final = "ws://HOST:PORT/v1/realtime?duplex=1"
_SCHEMES: Final = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}
ENV_CA_FILE: Final = "DUPLEXCTL_CA_FILE"
ENV_INSECURE: Final = "DUPLEXCTL_INSECURE"
INSECURE_WARNING: Final = (
    "WARNING: --insecure: the server's TLS certificate is NOT verified; anyone on the "
    "network path can impersonate the server. Use --ca-file PEM to trust a private CA."
)


@dataclass(frozen=True, slots=True)
class ServerUrl:
    """A parsed ``--url``: ``url`` is what the client connects to, ``typed`` what the user
    wrote, ``note`` the one line saying what was changed (None when nothing was)."""

    typed: str
    url: str
    note: str | None = None

    @property
    def secure(self) -> bool:
        return self.url.startswith("wss://")


def _bad(typed: str, why: str) -> BadInput:
    return BadInput(f"--url {typed!r} {why}; expected e.g. {EXAMPLE}")


def _check_host(typed: str, parts: SplitResult) -> None:
    try:
        port = parts.port
    except ValueError:
        raise _bad(typed, "has a port that is not a number in 0..65535") from None
    if not parts.hostname:
        raise _bad(typed, "names no host")
    if port == 0:
        raise _bad(typed, "has port 0")
    host = parts.hostname
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return
    if any(not (ch.isalnum() or ch in "-._") for ch in host):
        raise _bad(typed, f"has a host name with characters a host name cannot have ({host!r})")


def parse_url(typed: str) -> ServerUrl:
    """The URL a client connects to, from the user's ``--url`` (BadInput when malformed)."""
    text = typed.strip()
    if not text or any(ch.isspace() for ch in text):
        raise _bad(typed, "is empty or contains spaces")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if "://" not in text or scheme not in _SCHEMES:
        if "://" not in text:
            raise _bad(typed, "is not a URL (no scheme)")
        raise _bad(typed, f"has scheme {parts.scheme!r}: duplexctl speaks ws:// and wss://")
    _check_host(typed, parts)
    if parts.fragment:
        raise _bad(typed, "has a #fragment, which a websocket URL cannot have")
    changes = []
    new_scheme = _SCHEMES[scheme]
    if new_scheme != scheme:
        changes.append(f"{scheme}:// taken as {new_scheme}://")
    path, query = parts.path, parts.query
    if path in ("", "/"):
        path = DUPLEX_PATH
        query = f"{query}&{DUPLEX_QUERY}" if query else DUPLEX_QUERY
        changes.append(f"no path: using the duplex endpoint {DUPLEX_PATH}?{DUPLEX_QUERY}")
    url = urlunsplit((new_scheme, parts.netloc, path, query, ""))
    note = f"--url {typed}: {'; '.join(changes)} -> {url}" if changes else None
    return ServerUrl(typed=typed, url=url, note=note)


# --------------------------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TlsPolicy:
    """How ``wss://`` servers are verified (see the module docstring)."""

    ca_file: Path | None = None
    insecure: bool = False

    def check(self) -> None:
        """BadInput (exit 2) for a --ca-file that is not a readable PEM of certificates."""
        if self.ca_file is None:
            return
        try:
            ssl.create_default_context(cafile=str(self.ca_file))
        except FileNotFoundError:
            raise BadInput(f"--ca-file {self.ca_file}: no such file") from None
        except (OSError, ssl.SSLError) as exc:
            raise BadInput(
                f"--ca-file {self.ca_file}: not a PEM file of CA certificates ({exc})"
            ) from None

    def context(self) -> ssl.SSLContext:
        """The client TLS context this policy means."""
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=str(self.ca_file))
        return ssl.create_default_context()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TlsPolicy:
        env = os.environ if environ is None else environ
        ca = env.get(ENV_CA_FILE) or None
        insecure = env.get(ENV_INSECURE, "").strip().lower() in ("1", "true", "yes", "on")
        return cls(ca_file=Path(ca) if ca else None, insecure=insecure)


_process_tls: TlsPolicy | None = None


def use_tls(policy: TlsPolicy) -> None:
    """Install ``policy`` for this process. load's worker processes and Ray actors are given
    it in their ``LoadConfig`` (``target.tls``) and install it themselves: an environment
    does not reach an actor, which Ray's raylet starts, on this node or another."""
    global _process_tls
    policy.check()
    _process_tls = policy


def process_tls() -> TlsPolicy:
    """The policy :func:`use_tls` installed, else the one the environment states."""
    return _process_tls if _process_tls is not None else TlsPolicy.from_env()


def tls_for(url: str) -> ssl.SSLContext | None:
    """The TLS context for ``url`` under the process's policy (None for plain ``ws://``): the
    server's ``/metrics`` on the same host is trusted exactly like its websocket."""
    return process_tls().context() if url.startswith("wss:") else None


# --------------------------------------------------------------------------------------------
# The command line boundary and the embedded server
# --------------------------------------------------------------------------------------------


def prepare(typed: str | None, tls: TlsPolicy) -> tuple[str | None, list[str]]:
    """What a client command does with ``--url``/``--ca-file``/``--insecure`` before anything
    starts: the URL to use (None: the embedded server) and the lines to print (the URL's
    normalisation, the --insecure warning). BadInput (exit 2) for a malformed URL or CA file."""
    lines = []
    url = None
    if typed is not None:
        parsed = parse_url(typed)
        url = parsed.url
        if parsed.note:
            lines.append(parsed.note)
    use_tls(tls)
    if tls.insecure:
        lines.append(INSECURE_WARNING)
    return url, lines


@dataclass(frozen=True, slots=True)
class Target:
    """The server a command talks to: ``url`` to connect to; ``embedded`` the reference
    server's config when it was started in-process (None for ``--url``); ``line`` says so."""

    url: str
    embedded: ServerConfig | None
    line: str | None


@contextlib.asynccontextmanager
async def server_target(
    url: str | None,
    server_settings: Mapping[str, Any] | None = None,
    spelled: Mapping[str, str] | None = None,
) -> AsyncIterator[Target]:
    """``--url`` as given, or — without one — the reference server started in-process on a
    free loopback port (``server_settings``: ServerConfig fields, checked by
    :func:`duplexctl.server.config.embedded`: a bad one is BadInput naming the option that
    set it, ``spelled``) for as long as the block runs. docs/architecture.md: every command
    works on a fresh machine."""
    if url is not None:
        yield Target(url=url, embedded=None, line=None)
        return
    from duplexctl.server.config import embedded
    from duplexctl.server.embedded import embedded_server

    config = embedded(server_settings or {}, spelled)
    async with embedded_server(config) as embedded_url:
        yield Target(
            url=embedded_url,
            embedded=config,
            line=(
                f"no --url: started the reference server in-process at {embedded_url} "
                f"(simulated model, max_sessions {config.max_sessions})"
            ),
        )


#: each behaviour key of ``serve --behaviour`` and what a reader calls it
BEHAVIOUR_WORDS: Final = {
    "takeover_on_pause": "takeover of pauses",
    "backchannel_rate": "backchannels",
    "stop_latency_ms": "stop latency",
    "response_gap_ms": "response gap",
}


def server_behaviour(specs: list[str]) -> dict[str, Any]:
    """``--server-behaviour SPEC`` (repeatable): the embedded server's ``behaviour`` setting,
    as ``serve --behaviour`` reads it; a bad spec is BadInput naming the option."""
    if not specs:
        return {}
    from duplexctl.server.behaviour import parse_behaviours

    try:
        return {"behaviour": parse_behaviours(specs)}
    except ValueError as exc:
        raise BadInput(f"--server-behaviour: {exc}") from None


def missing_behaviour(target: Target, needs: str) -> str | None:
    """Why the embedded reference model cannot show what a scenario ``needs`` (its
    ``needs_behaviour``, as ``serve --behaviour`` spells it), and how to turn it on; None
    when it can, when nothing is needed, or for a ``--url`` server (its model is its own)."""
    if not needs or target.embedded is None:
        return None
    from duplexctl.server.behaviour import Behaviour

    default = Behaviour()
    try:
        wanted = default.with_spec(needs)
    except ValueError as exc:
        return f"the scenario's needs_behaviour {needs!r} is not a behaviour: {exc}"
    have = target.embedded.behaviour
    missing = [
        word
        for key, word in BEHAVIOUR_WORDS.items()
        if getattr(wanted, key) != getattr(default, key)
        and getattr(have, key) == getattr(default, key)
    ]
    if not missing:
        return None
    return (
        f"the embedded reference model has no {' or '.join(missing)} by default; run with "
        f"--server-behaviour {needs} to turn it on (or --url a model that has it)"
    )


#: what the server's VAD and the client's append grid add to any stop latency (the onset is
#: heard after some speech, on an append boundary): beyond this, the output unit explains it
STOP_SLACK_MS: Final = 250.0


def stop_latency_note(
    target: Target, measured_ms: float | None, *, sent_in_full: bool
) -> str | None:
    """Why a stop latency measured against the embedded reference model is larger than its
    configured ``stop-latency-ms`` (0 by default: it stops at once): the model speaks in
    output units (``chunk_ms``) and stops only what it has not sent, so the unit it had sent
    when it stopped plays out — or, when the whole answer had left the server before the
    stop (``sent_in_full``), all of it does. None within the slack, or for a ``--url``
    server (its configuration is unknown)."""
    if target.embedded is None or measured_ms is None:
        return None
    configured = target.embedded.behaviour.stop_latency_ms
    if measured_ms <= configured + STOP_SLACK_MS:
        return None
    unit = target.embedded.chunk_ms
    said = f"configured {configured:g} ms" + (
        " (the default: it stops at once)" if not configured else ""
    )
    text = (
        f"{measured_ms:.0f} ms against the embedded model's {said}: it speaks in {unit} ms "
        "output units (chunk_ms) and stops only what it has not sent yet, so the unit it had "
        f"sent plays out (up to {unit} ms more)"
    )
    if sent_in_full:
        text += "; here the whole answer had been sent before it stopped, so all of it played"
    return text
