#!/usr/bin/env bash
# The main job: install dependencies, build, and run `nemotron` with the given arguments.
# Without arguments it generates text with the trained default model, models/tiny-code (nothing to download).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >&2      # build and run dependencies only (the tests' come with scripts/test.sh)
scripts/build.sh app >&2
if [ $# -eq 0 ]; then
  # The trained default model (models/tiny-code, docs/MODELS.md) writes Python; --vs-plain decodes
  # again without speculation and reports the speedup and that the greedy output is bitwise the same.
  set -- run --prompt $'class Queue:\n    """A FIFO queue."""\n\n    def __init__(self' --max-tokens 96 --stats --vs-plain
fi
exec build/nemotron "$@"
