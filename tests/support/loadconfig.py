"""``load_config(sessions=2, count=4, workers=2, …)``: a LoadConfig from the flat names the
command line spells, each put into its part (duplexctl.load.config: target, conversation,
shape, capacity, output, server, execution), so a test states only what it varies."""

from __future__ import annotations

import dataclasses
from typing import Any

from duplexctl.load import config as c
from duplexctl.load.config import SETTING_FIELDS, LoadConfig

_PARTS: dict[str, type] = {
    "target": c.Target,
    "shape": c.Shape,
    "capacity": c.Capacity,
    "output": c.Output,
    "execution": c.Execution,
}


def load_config(**flat: Any) -> LoadConfig:
    """A LoadConfig from flat keyword arguments (an unknown name is a TypeError)."""
    parts: dict[str, dict[str, Any]] = {name: {} for name in _PARTS}
    flags: dict[str, Any] = {}
    conversation: dict[str, Any] = {}
    server: dict[str, Any] = {}
    for key, value in flat.items():
        if key in SETTING_FIELDS:
            flags[key] = value
        elif key == "inputs":
            conversation["inputs"] = tuple(str(v) for v in value)
        elif key == "session_file":
            conversation["session_file"] = None if value is None else str(value)
        elif key == "server_overrides":
            server["settings"] = dict(value)
        elif key == "slos":
            parts["capacity"]["slos"] = tuple(value)
        else:
            owner = next(
                (n for n, t in _PARTS.items() if key in {f.name for f in dataclasses.fields(t)}),
                None,
            )
            if owner is None:
                raise TypeError(f"LoadConfig has no part with {key!r}")
            parts[owner][key] = value
    return LoadConfig(
        conversation=c.Conversation(flags=flags, **conversation),
        server=c.EmbeddedServer(**server),
        **{name: _PARTS[name](**kw) for name, kw in parts.items()},
    )
