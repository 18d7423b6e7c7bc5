"""The compiled core: the per-append and per-frame modules, built with mypyc when installed.

Why: on a load run most of the client's CPU is the Python interpreter running the same few
modules for every append and every received frame (BENCHMARKS.md, round 5: 61 % of load's
samples in libpython, against 22 % in the kernel). mypyc compiles those type-annotated
modules to C extensions without changing their source; ``install.sh`` builds them with
``tools/build_native.py`` into ``build/native`` beside a manifest naming the sources' hash.

Why the guard: a compiled module must never stand in for a source that changed after it was
built (an edited file would silently not take effect). The compiled modules are used only
when the hash of every ``duplexctl`` source file equals the manifest's, all or none (they
call each other natively, and check the types of what they get from the others); otherwise,
or with ``DUPLEXCTL_PURE_PYTHON=1``, everything runs from source as before. Both ways behave
the same; the compiled one is stricter (wrong types raise TypeError at the boundary).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Final

#: What is compiled: the modules every append and every received frame run through.
COMPILED_MODULES: Final = (
    "duplexctl.audio.pacer",
    "duplexctl.audio.sendgrid",
    "duplexctl.client.connection",
    "duplexctl.client.websocket",
    "duplexctl.protocol.client_state",
    "duplexctl.protocol.ids",
    "duplexctl.protocol.invariants",
    "duplexctl.scenario.runner",
    "duplexctl.protocol.codec",
    "duplexctl.protocol.names",
    "duplexctl.scenario.clips",
    "duplexctl.load.recorder",
    "duplexctl.report.histogram",
    "duplexctl.load.slices",
    "duplexctl.report.turns",
)
PACKAGE_DIR: Final = Path(__file__).resolve().parent
NATIVE_DIR: Final = PACKAGE_DIR.parent / "build" / "native"
MANIFEST: Final = "manifest.json"
#: Set to 1 to run everything from source even when a fresh compiled core is there.
PURE_ENV: Final = "DUPLEXCTL_PURE_PYTHON"


def source_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """sha256 over every ``.py`` file of the package, by relative path, in path order."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


class _CompiledFinder:
    """A ``sys.meta_path`` finder for exactly the modules a fresh manifest lists."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        origin = self.paths.get(fullname)
        if origin is None:
            return None
        loader = ExtensionFileLoader(fullname, str(origin))
        return ModuleSpec(fullname, loader, origin=str(origin))


def fresh_modules(native_dir: Path, package_dir: Path = PACKAGE_DIR) -> dict[str, Path] | None:
    """Module name -> extension file from ``native_dir``'s manifest, if it was built for this
    interpreter from exactly these sources and every file is there; else None."""
    try:
        manifest = json.loads((native_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("suffix") != EXTENSION_SUFFIXES[0]:
        return None
    modules = manifest.get("modules")
    if not isinstance(modules, dict) or not modules:
        return None
    paths = {str(name): native_dir / str(rel) for name, rel in modules.items()}
    if not all(p.is_file() for p in paths.values()):
        return None
    if manifest.get("source_sha256") != source_hash(package_dir):
        return None
    return paths


_active = False


def activate() -> bool:
    """Use the compiled core if it is fresh (and not switched off); True if it is in use.
    Called once by ``duplexctl/__init__.py``, before any compiled module can be imported."""
    global _active
    if _active or os.environ.get(PURE_ENV, "") not in ("", "0"):
        return _active
    if any(name in sys.modules for name in COMPILED_MODULES):
        return False  # too late: one of them already runs from source
    paths = fresh_modules(NATIVE_DIR)
    if paths is None:
        return False
    sys.meta_path.insert(0, _CompiledFinder(paths))
    _active = True
    return True


def active() -> bool:
    """Whether the compiled core is in use in this process (reported by ``load``)."""
    return _active
