#!/usr/bin/env bash
# Reproduces the numbers in docs/PERFORMANCE.md. Writes the full-width synthetic checkpoints it
# needs under $MODELS (default /tmp/nemotron-models; ~6 GB for 8 layers, ~18 GB with --full).
# Usage: tools/bench/run_benchmarks.sh [--full] [build-dir]
# Side by side with llama.cpp (same checkpoint as a GGUF, llama-bench vs nemotron bench, alternating):
# tools/bench/vs_llama.sh [--layers 8|52] (fetches llama.cpp with npm; docs/PERFORMANCE.md, issue 13).
set -euo pipefail
cd "$(dirname "$0")/../.."
full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
B=${1:-build}/nemotron
M=${MODELS:-/tmp/nemotron-models}
mkdir -p "$M"
synth() {  # dir args...
  local d=$1; shift
  [ -f "$d/config.json" ] || "$B" synth --out "$d" "$@" --threads 2
}
synth "$M/lightning-5L-bf16" --preset lightning --pattern "MEM*E" --dtype bf16
synth "$M/lightning-8L-nvfp4" --preset lightning --layers 8 --format modelopt
echo "== bf16, 5 layers (MEM*E), full width"
"$B" bench -m "$M/lightning-5L-bf16" --prompt-tokens 64 --gen 32 -t 2 --reps 2 --membw
echo "== NVFP4 (ModelOpt mixed precision), 8 layers, full width: 1 and 2 threads"
"$B" bench -m "$M/lightning-8L-nvfp4" --prompt-tokens 64 --gen 32 -t 1 --reps 2
"$B" bench -m "$M/lightning-8L-nvfp4" --prompt-tokens 64 --gen 32 -t 2 --reps 2 --membw --verify-curve \
  --spec oracle,mtp,ngram --gammas 1,2,3,4,5,6,7
if [ $full = 1 ]; then
  synth "$M/lightning-52L-nvfp4" --preset lightning --format modelopt
  echo "== NVFP4 (ModelOpt mixed precision), all 52 layers + MTP"
  "$B" bench -m "$M/lightning-52L-nvfp4" --prompt-tokens 64 --gen 16 -t 2 --membw
fi
