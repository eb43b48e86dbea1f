#!/usr/bin/env bash
# Installs what building and running nemotron needs on Debian 12 (bookworm); with --test, also the
# test-only tools (GoogleTest, Google Benchmark, python3-torch/numpy/jinja2/matplotlib for the
# PyTorch oracle and tools/train, clang with libFuzzer / its sanitizer runtimes, OpenMP and
# llvm-symbolizer for scripts/fuzz.sh, and the npm cross-check deps). Idempotent: does nothing when
# everything is present. Runs as root (CI) or through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libcpp-httplib-dev
)
test=0
[ "${1:-}" = "--test" ] && test=1
if ((test)); then
  PKGS+=(libgtest-dev libgmock-dev libbenchmark-dev
         python3 python3-numpy python3-torch python3-jinja2 python3-matplotlib
         clang libclang-rt-dev libomp-dev llvm)
fi
# nodejs/npm (test-only) are checked by command, not package, in install-text-deps.sh.

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Test-only JavaScript tools (tokenizer cross-check), when that part of the tree is present.
if ((test)) && [ -x scripts/install-text-deps.sh ]; then
  scripts/install-text-deps.sh
fi
