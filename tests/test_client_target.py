"""--url normalisation and the TLS policy, in one place (duplexctl/client/target.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duplexctl.client.target import (
    ENV_CA_FILE,
    ENV_INSECURE,
    TlsPolicy,
    parse_url,
    prepare,
    process_tls,
)
from duplexctl.errors import BadInput


@pytest.mark.parametrize(
    ("typed", "url", "changed"),
    [
        ("ws://h:8000/v1/realtime?duplex=1", "ws://h:8000/v1/realtime?duplex=1", False),
        ("wss://h/v1/duplex", "wss://h/v1/duplex", False),
        ("http://h:8000/v1/realtime?duplex=1", "ws://h:8000/v1/realtime?duplex=1", True),
        ("HTTPS://h:8443/v1/realtime", "wss://h:8443/v1/realtime", True),
        ("ws://h:8000", "ws://h:8000/v1/realtime?duplex=1", True),
        ("http://h:8000/", "ws://h:8000/v1/realtime?duplex=1", True),
        ("ws://h:8000/?model=m", "ws://h:8000/v1/realtime?model=m&duplex=1", True),
        ("ws://[::1]:8000", "ws://[::1]:8000/v1/realtime?duplex=1", True),
        ("ws://user:pw@h:1/proxy/rt", "ws://user:pw@h:1/proxy/rt", False),
    ],
)
def test_urls_are_normalised_and_the_change_is_said(typed: str, url: str, changed: bool) -> None:
    parsed = parse_url(typed)
    assert parsed.url == url and parsed.typed == typed
    assert (parsed.note is not None) == changed
    if changed:
        assert parsed.note is not None and parsed.note.startswith(f"--url {typed}:")


@pytest.mark.parametrize(
    "typed",
    ["", "  ", "notaurl", "localhost:8000", "ftp://h/", "ws://", "ws://h:abc/", "ws://h:0/",
     "ws://h:70000/", "ws://h/a b", "ws://h/#frag", "ws://bad_host!/"],
)  # fmt: skip
def test_malformed_urls_are_bad_input_naming_the_url(typed: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_url(typed)
    assert caught.value.exit_code == 2 and repr(typed) in str(caught.value)
    assert "ws://HOST:PORT/v1/realtime?duplex=1" in str(caught.value)


def test_prepare_installs_the_policy_for_this_process_and_leaves_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load's workers and Ray actors get the policy in their configuration (an environment
    does not reach an actor): prepare installs it here and writes no variable."""
    import os

    import trustme

    ca = trustme.CA()
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    monkeypatch.delenv(ENV_CA_FILE, raising=False)
    monkeypatch.delenv(ENV_INSECURE, raising=False)
    url, lines = prepare("wss://h:1/v1/realtime", TlsPolicy(ca_file=pem))
    assert url == "wss://h:1/v1/realtime" and lines == []
    assert process_tls() == TlsPolicy(ca_file=pem)
    _, lines = prepare(None, TlsPolicy(insecure=True))
    assert any("WARNING: --insecure" in line for line in lines)
    assert process_tls() == TlsPolicy(insecure=True)
    assert ENV_CA_FILE not in os.environ and ENV_INSECURE not in os.environ
    prepare(None, TlsPolicy())  # back to the default for the rest of the session
    assert process_tls() == TlsPolicy()


def test_a_ca_file_that_is_not_pem_is_bad_input(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(BadInput, match="not a PEM file"):
        TlsPolicy(ca_file=junk).check()
