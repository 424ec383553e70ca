#!/usr/bin/env bash
# Installs everything Sluice and its tests need, on a fresh Debian machine (run as root for the
# system packages). Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
VENV=${VENV:-.venv}

# System packages: bubblewrap and libseccomp (code sandbox), chromium (HTML report tests).
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "warning: missing system packages ${need[*]} (run as root or: sudo apt-get install ${need[*]})" >&2
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -U pip
# The CPU build of torch first, so nothing later resolves a CUDA build.
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q -e '.[dev,scale,onnx]'
echo "setup done: $("$VENV/bin/sluice" --version 2>/dev/null || echo sluice installed)"
