#!/usr/bin/env bash
# The main job: install dependencies, build, and run `nemotron` with the given arguments.
# Without arguments it generates text with the embedded default model (nothing to download).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >&2
scripts/build.sh release >&2
if [ $# -eq 0 ]; then
  set -- run --prompt "The Nemotron-H hybrid model" --max-tokens 48 --stats
fi
exec build/nemotron "$@"
