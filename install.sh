#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine: system packages, then duplexctl in .venv.
#   bash install.sh
# System packages: libportaudio2 (sounddevice), pulseaudio + pulseaudio-utils (a real sound
# server for the audio-device tests), espeak-ng + sox (real speech recordings).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PKGS=(libportaudio2 pulseaudio pulseaudio-utils espeak-ng sox)
if ! dpkg -s "${PKGS[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}"
fi
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "duplexctl needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
echo "duplexctl installed: $(.venv/bin/duplexctl --version)"
