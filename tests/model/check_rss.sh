#!/usr/bin/env bash
# Weights are mapped, not copied: peak RSS while generating on a bf16 full-width checkpoint stays
# within 1.15 × the checkpoint's file size plus the sequence state. (On a ModelOpt checkpoint with a
# MoE layer, tests/model/check_rss_moe.py checks that only the pages read are resident; ctest
# memory_mapped_moe_pages.)
# Usage: check_rss.sh path/to/nemotron
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Full Lightning width (hidden 2688, vocab 131072), one Mamba + one attention layer (~1.5 GB).
"$bin" synth --preset lightning --pattern "M*" --no-mtp --dtype bf16 --out "$dir/m" --quiet >/dev/null
"$bin" bench --model "$dir/m" --prompt-tokens 32 --gen 16 --threads 2 --cold --json >"$dir/bench.json"
/usr/bin/python3 - "$dir/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
limit = 1.15 * b["file_gb"] + b["state_mb"] / 1e3
print(f"peak RSS {b['peak_rss_gb']:.3f} GB, file {b['file_gb']:.3f} GB, state {b['state_mb']:.1f} MB, limit {limit:.3f} GB")
if b["decode_tok_s"] <= 0:
    sys.exit("no decode happened")
if b["peak_rss_gb"] > limit:
    sys.exit("FAIL: peak RSS exceeds 1.15 x file size + state")
print("rss check: 1 passed, 0 failed")
PY
