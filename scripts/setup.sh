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

# pip's settings on this machine (config files and PIP_* variables: local wheel folders, extra
# indexes, constraints, certificate), for uv, which reads none of them. Prints one uv option
# per line.
uv_options() {
  "$VENV/bin/pip" config list 2>/dev/null | sed -n "s/^[^.]*\.\([a-z-]*\)='\(.*\)'$/\1 \2/p" |
    while read -r key values; do
      for v in $values; do
        case "$key" in
          find-links) echo "--find-links=$v" ;;
          extra-index-url) echo "--extra-index-url=$v" ;;
          index-url) echo "--index-url=$v" ;;
          constraint) echo "--constraint=$v" ;;
        esac
      done
    done | sort -u
}

# The CPU build of torch first, so nothing later resolves a CUDA build. uv installs the same
# resolution as pip in less than half the time (2m17s -> 1m02s on this project's 2-core
# machine, both with empty caches); where uv cannot be had or fails, pip does the install.
install() {
  local opts=()
  mapfile -t opts < <(uv_options)
  local cert
  cert=$("$VENV/bin/pip" config list 2>/dev/null | sed -n "s/^[^.]*\.cert='\(.*\)'$/\1/p" | head -n1)
  if [ -x "$VENV/bin/uv" ] || "$VENV/bin/pip" install -q uv >/dev/null 2>&1; then
    # --index-strategy: the best version over all indexes, as pip picks (uv's default stops at
    # the first index that has the package). --compile-bytecode, as pip does: where
    # PYTHONDONTWRITEBYTECODE is set (this machine sets it), nothing compiles a module later, and
    # every process then compiles what it imports from source (sympy, torch...): the data test
    # run took 20:42 instead of 15:20
    if env ${cert:+SSL_CERT_FILE="$cert"} "$VENV/bin/uv" pip install -q --compile-bytecode \
        --index-strategy unsafe-best-match --python "$VENV/bin/python" "${opts[@]}" "$@"; then
      return 0
    fi
    echo "uv could not install $*; pip will" >&2
  fi
  "$VENV/bin/pip" install -q -U pip
  "$VENV/bin/pip" install -q "$@"
}
install "torch==2.13.0"
install -e '.[dev,scale,onnx]'
# a CUDA build would be gigabytes of unused libraries here, and say that a resolver went wrong
"$VENV/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda and f"torch {torch.__version__} is a CUDA build: remove {sys.prefix} and run make setup again")'
echo "setup done: $("$VENV/bin/sluice" --version 2>/dev/null || echo sluice installed)"
