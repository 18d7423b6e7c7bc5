#!/usr/bin/env bash
# The whole set-up on a fresh Debian or Ubuntu machine: system packages, then duplexctl with
# its test tools in .venv at the exact versions of constraints.txt (what CI tested).
#   bash install.sh
# System packages: libportaudio2 (sounddevice), pulseaudio + pulseaudio-utils (a real sound
# server for the audio-device tests), espeak-ng + sox (real speech recordings), and python3 /
# python3-venv when no usable Python is there, chromium (a real browser for the HTML report's
# tests, driven by Playwright from the dev extra: no browser is downloaded), and prometheus (a
# real remote-write receiver and query API for the --prometheus-rw and Grafana dashboard tests;
# the tests start their own on loopback: the package's service is not used).
# Re-running it is cheap: what is there stays.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PY="${PYTHON:-python3}"
PKGS=(libportaudio2 pulseaudio pulseaudio-utils espeak-ng sox chromium prometheus)
# Debian's python3 cannot create a virtualenv without python3-venv (no ensurepip).
command -v "$PY" >/dev/null 2>&1 || PKGS+=(python3)
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || PKGS+=(python3-venv)
if ! dpkg -s "${PKGS[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}"
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "duplexctl needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,ray,aec]'
echo "duplexctl installed: $(.venv/bin/duplexctl --version)"
