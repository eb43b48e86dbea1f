#!/usr/bin/env bash
# Configure + build. Usage: scripts/build.sh [release|asan|app] (default release).
# app: the release `nemotron` binary alone (no tests, no benchmarks): what scripts/run.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
case "$kind" in
  release) dir=build; target=(); flags=(-DCMAKE_BUILD_TYPE=Release -DNEMOTRON_BUILD_TESTS=ON) ;;
  app) dir=build; target=(nemotron); flags=(-DCMAKE_BUILD_TYPE=Release -DNEMOTRON_BUILD_TESTS=OFF -DNEMOTRON_BUILD_BENCH=OFF) ;;
  asan) dir=build-asan; target=(); flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEMOTRON_SANITIZE=ON -DNEMOTRON_BUILD_BENCH=OFF) ;;
  *) echo "usage: $0 [release|asan|app]" >&2; exit 2 ;;
esac
jobs=${NEMOTRON_JOBS:-$(nproc)}
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
ninja -C "$dir" -j "$jobs" "${target[@]}"
