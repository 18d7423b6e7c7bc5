"""Build duplexctl's compiled core (``duplexctl.native``) with mypyc into ``build/native``.

    .venv/bin/python tools/build_native.py

Run by ``install.sh`` after the package is installed (mypy, which brings mypyc, is a dev
dependency); needs a C compiler and the Python headers. The manifest, naming the hash of the
sources compiled, is written last, so an interrupted or failed build leaves no manifest and
duplexctl runs from source. Takes about a minute; run it again after changing the sources
(until then the stale build is ignored, see ``duplexctl/native.py``).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from duplexctl.native import (  # noqa: E402
    COMPILED_MODULES,
    MANIFEST,
    NATIVE_DIR,
    PACKAGE_DIR,
    source_hash,
)

#: mypy's checks as mypyc needs them: the compiled modules must type-check; what they
#: import is read for its types only (``silent``), third-party packages without stubs as Any.
MYPY_FLAGS = ["--ignore-missing-imports", "--follow-imports=silent"]


def module_file(name: str) -> str:
    return str(Path(*name.split(".")).with_suffix(".py"))


def main() -> int:
    try:
        from mypyc.build import mypycify
        from setuptools import SetuptoolsDeprecationWarning, setup
    except ImportError as exc:
        print(f"build_native: {exc.name} is not installed (pip install mypy setuptools)")
        return 1
    # setup() reads pyproject.toml, whose metadata is not this build's business
    warnings.filterwarnings("ignore", category=SetuptoolsDeprecationWarning)
    started = time.monotonic()
    expected = source_hash(PACKAGE_DIR)
    (NATIVE_DIR / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(NATIVE_DIR, ignore_errors=True)
    NATIVE_DIR.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="duplexctl-native-") as temp:
        extensions = mypycify(
            [*MYPY_FLAGS, *(module_file(m) for m in COMPILED_MODULES)],
            opt_level="3",
            target_dir=str(Path(temp) / "c"),
        )
        setup(
            name="duplexctl-native",
            ext_modules=extensions,
            script_args=[
                "--quiet", "build_ext", "--build-lib", str(NATIVE_DIR),
                "--build-temp", str(Path(temp) / "o"),
            ],
        )  # fmt: skip
    if source_hash(PACKAGE_DIR) != expected:
        print("build_native: the sources changed during the build; run it again")
        return 1
    suffix = EXTENSION_SUFFIXES[0]
    modules = {
        ".".join(p.relative_to(NATIVE_DIR).parts)[: -len(suffix)]: p.relative_to(NATIVE_DIR)
        for p in NATIVE_DIR.rglob(f"*{suffix}")
    }
    missing = set(COMPILED_MODULES) - set(modules)
    if missing:
        print(f"build_native: not built: {sorted(missing)}")
        return 1
    manifest = {
        "source_sha256": expected,
        "suffix": suffix,
        "modules": {name: str(rel) for name, rel in sorted(modules.items())},
    }
    (NATIVE_DIR / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(
        f"build_native: {len(COMPILED_MODULES)} modules compiled into "
        f"{NATIVE_DIR.relative_to(ROOT)} in {time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
