#!/usr/bin/env bash
# Behaviour check for refactors: OLD and NEW nemotron binaries must agree byte for byte.
#   tools/check/compare_outputs.sh OLD_BIN NEW_BIN [WORKDIR]
# Checks: checkpoints OLD's synth writes (every tiny preset/format, both drafters) are
# byte-identical when NEW writes them; run --ids (greedy, sampled, spec none/auto/ngram, fp8 KV,
# text) prints the same; dump logits (with the MTP head) are the same bytes; inspect prints the same.
set -euo pipefail
OLD=$1 NEW=$2 W=${3:-$(mktemp -d)}
mkdir -p "$W"
names=(a b c q_dense q_modelopt q_mlx4 q_mlx8 dflash dspark)
synth_all() {  # BIN PREFIX
  local B=$1 P=$2
  for p in a b c; do "$B" synth --preset tiny-$p --out "$W/$P-$p" --quiet; done
  for f in dense modelopt mlx4 mlx8; do "$B" synth --preset tiny-q --format $f --out "$W/$P-q_$f" --quiet; done
  for k in dflash dspark; do "$B" synth --preset tiny-a --drafter $k --out "$W/$P-$k" --quiet; done
}
synth_all "$OLD" old
synth_all "$NEW" new
for n in "${names[@]}"; do
  (cd "$W/old-$n" && sha256sum ./*.safetensors ./*.json) > "$W/sums-old-$n"
  (cd "$W/new-$n" && sha256sum ./*.safetensors ./*.json) > "$W/sums-new-$n"
  diff -q "$W/sums-old-$n" "$W/sums-new-$n" >/dev/null || { echo "synth differs: $n"; exit 1; }
done
outputs() {  # BIN
  local B=$1
  for n in a b c q_dense q_modelopt q_mlx4 q_mlx8; do
    local d="$W/old-$n"
    for ids in 1,2,3 5 7,7,7,7,7,7,7,7,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24; do
      for spec in none auto ngram; do echo "$n [$ids] $spec: $("$B" run -m "$d" --ids $ids --spec $spec -n 24 2>&1)"; done
      echo "$n [$ids] sampled: $("$B" run -m "$d" --ids $ids --spec none --temp 0.9 --top-p 0.95 --seed 5 -n 24 2>&1)"
      echo "$n [$ids] sampled-spec: $("$B" run -m "$d" --ids $ids --temp 0.9 --top-k 40 --seed 5 -n 24 2>&1)"
    done
    echo "$n text: $("$B" run -m "$d" --prompt 'The Nemotron-H hybrid' -n 16 2>&1)"
    echo "$n kv8: $("$B" run -m "$d" --ids 1,2,3 --kv-cache fp8 -n 16 2>&1)"
    "$B" inspect "$d" --json 2>&1
  done
  "$B" inspect "$W/old-a" --draft "$W/old-dflash" --json 2>&1
}
outputs "$OLD" > "$W/out-old.txt"
outputs "$NEW" > "$W/out-new.txt"
diff "$W/out-old.txt" "$W/out-new.txt" || { echo "run/inspect outputs differ"; exit 1; }
for n in a q_modelopt; do
  for B in old new; do
    bin=$OLD; [ $B = new ] && bin=$NEW
    "$bin" dump -m "$W/old-$n" --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --gen 8 --out "$W/dump-$B-$n" --mtp-dump
  done
  for ext in f32 mtp.f32 json; do cmp "$W/dump-old-$n.$ext" "$W/dump-new-$n.$ext" || { echo "dump differs: $n.$ext"; exit 1; }; done
done
echo "compare_outputs: identical ($(wc -l < "$W/out-new.txt") output lines, ${#names[@]} checkpoints, 2 dumps)"
