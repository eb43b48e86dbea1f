#!/usr/bin/env bash
# Installs what the server's client tests need on Debian 12 (idempotent, quiet when present):
#   chromium (headless browser test) and curl from apt, nodejs + npm, and the npm test
#   dependencies in tests/server/js (the OpenAI JS SDK, playwright-core). Test-only:
#   scripts/run.sh never calls this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/curl ] || need_apt+=(curl)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "install-server-test-deps: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

JS="$ROOT/tests/server/js"
# npm ci only when node_modules is missing or older than the lock file.
stamp="$JS/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$JS/package-lock.json" -nt "$stamp" ] ||
   [ ! -f "$JS/node_modules/openai/package.json" ] || [ ! -f "$JS/node_modules/playwright-core/package.json" ]; then
  echo "install-server-test-deps: npm ci in tests/server/js"
  (cd "$JS" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "install-server-test-deps: ok"
