#!/usr/bin/env bash
# Side by side with llama.cpp (issue 13): the same synthetic full-width Lightning checkpoint, run by
# `nemotron bench` and by llama.cpp's `llama-bench`, alternating (A B A B ...), one table at the end.
#
#   tools/bench/vs_llama.sh [--layers 8|52] [--rounds N] [--threads 1,2] [--reps N] [--nemotron BIN]
#                           [--arith f32,bf16]   (nemotron's --arith values, each run every round)
#                           [--prompt N] [--gen N]  (prefill and decode lengths; default 64 and 32)
#
# Steps (each skipped when its result is already there):
#   1. llama.cpp: `npm pack node-llama-cpp@3.22.1` into the cache ($NEMOTRON_BENCH_CACHE, default
#      ~/.cache/nemotron-bench); its llama/gitRelease.bundle is a git bundle of llama.cpp (node-llama-cpp's
#      release v0.5.0, which has `nemotron_h_moe`, its MTP head and the NVFP4 ggml type). Clone it, build
#      only `llama-bench` (Release, CPU only, GGML_NATIVE=ON, no network code: LLAMA_OPENSSL=OFF; curl is
#      gone from this llama.cpp). Where that build dies with SIGILL on a CPU with AMX (seen on a Xeon
#      VM: its AMX kernels), a second one with AMX off ($LLAMA/build-noamx) is built and used, and
#      the table's ISA column says so.
#   2. The checkpoint: `nemotron synth --preset lightning --layers 8 --format modelopt` (8 layers
#      MEMEM*EM; --layers 52 for the full model: 21.5 GB with its MTP module + a ~19 GB GGUF, which
#      wants the RAM to keep both in the page cache, or the runs measure the disk), then
#      tools/bench/gguf_from_synth.py writes the GGUF llama.cpp's converter would emit for it (names and
#      metadata of `nemotron_h_moe`, read from the checkout's own gguf-py). Widths and layout are the
#      same; NVFP4 experts / shared expert / lm_head are repacked bit-exactly (ModelOpt nibble order ->
#      ggml block_nvfp4). APPROXIMATE: ggml has no FP8, so the FP8 Mamba in/out projections become Q8_0
#      (dequantized and requantized like llama.cpp's --fp8-as-q8: ~0.4 % error, 6.25 % more bytes), and
#      the router is F32 as llama.cpp's converter forces (the engine reads bf16). Those extra bytes are
#      added to llama.cpp's bytes per token in the roofline column. The MTP head is not exported.
#      A short llama-bench run checks that the GGUF loads and generates before measuring.
#   3. For each round: llama-bench (pp$PP and tg$TG, all thread counts, -r REPS), then nemotron bench
#      (--prompt-tokens $PP --gen $TG --reps REPS --membw, one run per thread count). Per round each
#      engine's best repetition is kept (llama-bench's fastest sample, nemotron's best-of-reps); the
#      table shows the median over rounds. Where the checkpoint and the GGUF together exceed 80 % of
#      RAM (52 layers), each engine runs with the other's file dropped from the page cache.
#
# Roofline share = decode tok/s x weight bytes read per token / read bandwidth. The bytes are the
# engine's `decode_bytes_per_token` (dense matrices, router, top-k average experts + shared expert,
# lm_head, one embedding row), plus the Q8_0/F32 excess for llama.cpp; the bandwidth is nemotron
# bench's --membw probe at that thread count (best over the rounds). ISA: nemotron's kernel path as
# `bench` prints it; llama.cpp's CPU features from llama_print_system_info() (the line llama-cli
# prints as system_info), read from the built libllama.so.
#
# Measure on an idle machine: the ratio is only as good as the quiet around it. Raw JSON of every run
# goes to $CACHE/runs/<timestamp>/. This is a benchmark script, not a test (nothing in CI calls it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${NEMOTRON_BENCH_CACHE:-$HOME/.cache/nemotron-bench}
NODE_LLAMA_CPP=node-llama-cpp@3.22.1
PY=${PYTHON:-/usr/bin/python3}
NEMOTRON=$ROOT/build/nemotron
LAYERS=8
ROUNDS=2
THREADS=1,2
REPS=3
PP=64
TG=32
JOBS=${JOBS:-2}

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
  echo "vs_llama: error: $*" >&2
  exit 1
}
step() { echo "==> $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --layers) LAYERS=${2:?--layers needs a value}; shift 2 ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift 2 ;;
    --threads) THREADS=${2:?--threads needs a value}; shift 2 ;;
    --reps) REPS=${2:?--reps needs a value}; shift 2 ;;
    --nemotron) NEMOTRON=${2:?--nemotron needs a value}; shift 2 ;;
    --arith) ARITH=${2:?--arith needs a value}; shift 2 ;;
    --prompt) PP=${2:?--prompt needs a value}; shift 2 ;;
    --gen) TG=${2:?--gen needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $LAYERS == 8 || $LAYERS == 52 ]] || die "--layers must be 8 or 52"
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $REPS =~ ^[1-9][0-9]*$ ]] || die "--rounds and --reps take a positive integer"
[[ $PP =~ ^[1-9][0-9]*$ && $TG =~ ^[1-9][0-9]*$ ]] || die "--prompt and --gen take a positive integer"
[[ $THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--threads takes a comma list, e.g. 1,2"
ARITH=${ARITH:-f32}
[[ $ARITH =~ ^(f32|bf16)(,(f32|bf16))*$ ]] || die "--arith takes a comma list of f32 and bf16"
[[ -x $NEMOTRON ]] || die "$NEMOTRON not found: build it first (nice -n 10 scripts/build.sh app)"
"$PY" -c 'import numpy' 2>/dev/null || die "$PY cannot import numpy (set PYTHON=)"
mkdir -p "$CACHE"

# ---------------------------------------------------------------------------- 1. llama.cpp
LLAMA=$CACHE/llama.cpp
BUNDLE=$CACHE/package/llama/gitRelease.bundle
LLAMA_BENCH=$LLAMA/build/bin/llama-bench
if [[ ! -f $BUNDLE ]]; then
  command -v npm >/dev/null || die "npm is not installed (apt-get install npm); it fetches $NODE_LLAMA_CPP"
  step "fetching $NODE_LLAMA_CPP with npm into $CACHE"
  tgz=$(cd "$CACHE" && npm pack "$NODE_LLAMA_CPP" --silent | tail -n 1)
  [[ -f $CACHE/$tgz ]] || die "npm pack $NODE_LLAMA_CPP wrote no tarball"
  tar -xzf "$CACHE/$tgz" -C "$CACHE" package/llama/gitRelease.bundle package/llama/binariesGithubRelease.json ||
    die "$tgz has no llama/gitRelease.bundle"
  [[ -f $BUNDLE ]] || die "$BUNDLE missing after unpacking $tgz"
else
  step "llama.cpp bundle present: $BUNDLE"
fi
if [[ ! -f $LLAMA/CMakeLists.txt ]]; then
  step "cloning the llama.cpp bundle into $LLAMA"
  git bundle list-heads "$BUNDLE" 2>/dev/null | grep -q . || die "$BUNDLE is not a git bundle"
  rm -rf "$LLAMA.tmp"
  git clone -q "$BUNDLE" "$LLAMA.tmp" 2>/dev/null || die "git clone of $BUNDLE failed"
  mv "$LLAMA.tmp" "$LLAMA"
fi
grep -q nemotron_h_moe "$LLAMA/src/llama-arch.cpp" || die "this llama.cpp has no nemotron_h_moe architecture"
# build_llama DIR [C/C++ FLAGS]: llama-bench into $LLAMA/DIR.
build_llama() {
  local dir=$LLAMA/$1 flags=${2:-}
  step "building llama-bench into $dir (Release, CPU, GGML_NATIVE=ON${flags:+, $flags}; -j$JOBS, niced; ~15 min on 2 cores)"
  cmake -S "$LLAMA" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF >"$CACHE/llama-cmake-$1.log" 2>&1 || die "cmake failed: see $CACHE/llama-cmake-$1.log"
  nice -n 10 cmake --build "$dir" --target llama-bench -j "$JOBS" >"$CACHE/llama-build-$1.log" 2>&1 ||
    die "llama-bench build failed: see $CACHE/llama-build-$1.log"
  [[ -x $dir/bin/llama-bench ]] || die "the build did not produce $dir/bin/llama-bench"
}
if [[ ! -x $LLAMA_BENCH ]]; then
  build_llama build
else
  step "llama-bench present: $LLAMA_BENCH"
fi

# ---------------------------------------------------------------------------- 2. checkpoint + GGUF
MODEL=$CACHE/lightning-l$LAYERS-modelopt
GGUF=$MODEL.gguf
if [[ ! -f $MODEL/config.json ]]; then
  step "writing the synthetic checkpoint $MODEL ($LAYERS layers, ModelOpt NVFP4 layout)"
  synth=(--preset lightning --format modelopt --out "$MODEL.tmp")
  [[ $LAYERS == 52 ]] || synth+=(--layers "$LAYERS")
  rm -rf "$MODEL.tmp"
  "$NEMOTRON" synth "${synth[@]}" >&2 || die "nemotron synth failed"
  mv "$MODEL.tmp" "$MODEL"
else
  step "checkpoint present: $MODEL"
fi
if [[ ! -f $GGUF || ! -f $GGUF.json || $GGUF -ot $MODEL/config.json || $GGUF -ot $ROOT/tools/bench/gguf_from_synth.py ]]; then
  step "converting to GGUF: $GGUF"
  "$PY" "$ROOT/tools/bench/gguf_from_synth.py" --llama-dir "$LLAMA" --model "$MODEL" --out "$GGUF.tmp" ||
    die "GGUF conversion failed"
  mv "$GGUF.tmp.json" "$GGUF.json"
  mv "$GGUF.tmp" "$GGUF"
else
  step "GGUF present: $GGUF"
fi
step "checking that llama.cpp loads and generates with the GGUF (pp8 + tg4, 1 thread)"
smoke() { "$LLAMA_BENCH" -m "$GGUF" -p 8 -n 4 -t 1 -r 1 --no-warmup -o md >"$CACHE/llama-smoke.log" 2>&1; }
smoke_rc=0
smoke || smoke_rc=$?
# On a 2-vCPU Xeon VM with AMX (2026-12-03) the native build's AMX kernel for the Q8_0 Mamba
# projections died with SIGILL at its first TILEZERO, though AMX itself ran there: build once more
# with AMX off, as a user would, and say so in the table.
if ((smoke_rc == 132)) && grep -qw amx_tile /proc/cpuinfo; then
  step "llama-bench died with SIGILL (its AMX kernels); using a build with AMX off"
  LLAMA_BENCH=$LLAMA/build-noamx/bin/llama-bench
  [[ -x $LLAMA_BENCH ]] || build_llama build-noamx "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  smoke_rc=0
  smoke || smoke_rc=$?
fi
((smoke_rc == 0)) ||
  { tail -n 20 "$CACHE/llama-smoke.log" >&2; die "llama-bench could not run the GGUF (log: $CACHE/llama-smoke.log)"; }

# ---------------------------------------------------------------------------- 3. A B A B
RUN=$CACHE/runs/$(date -u +%Y%m%dT%H%M%SZ)-l$LAYERS
mkdir -p "$RUN"
# Where the checkpoint and the GGUF do not both fit in the page cache (52 layers: 21.5 + ~19 GB),
# each engine's run would find part of its file evicted by the other's and read it back from disk
# (on 2026-12-04, 24 GB of RAM: nemotron's mapping then held 65-75 % of its pages in 2 MB pages
# instead of 98 %). So before each engine runs, the other engine's file leaves the page cache
# (posix_fadvise DONTNEED: clean pages only, nothing is lost) and each measures its own file warm,
# as it would run alone.
evict() {
  "$PY" -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$@"
}
MODEL_FILES=("$MODEL"/*.safetensors)
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
files_kb=$(( $(du -sLk "${MODEL_FILES[@]}" "$GGUF" | awk '{s += $1} END {print s}') ))
EVICT=0
if ((files_kb > mem_kb * 8 / 10)); then
  EVICT=1
  step "checkpoint + GGUF ($((files_kb / 1048576)) GB) exceed 80 % of RAM ($((mem_kb / 1048576)) GB): each engine runs with the other's file dropped from the page cache"
fi
IFS=, read -r -a TLIST <<<"$THREADS"
IFS=, read -r -a ALIST <<<"$ARITH"
for ((r = 1; r <= ROUNDS; r++)); do
  ((EVICT)) && evict "${MODEL_FILES[@]}"
  step "round $r/$ROUNDS: llama-bench -p $PP -n $TG -t $THREADS -r $REPS"
  "$LLAMA_BENCH" -m "$GGUF" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" -o json >"$RUN/llama_r$r.json" \
    2>"$RUN/llama_r$r.log" || { tail -n 20 "$RUN/llama_r$r.log" >&2; die "llama-bench failed"; }
  ((EVICT)) && evict "$GGUF"
  for t in "${TLIST[@]}"; do
    for a in "${ALIST[@]}"; do
      step "round $r/$ROUNDS: nemotron bench --prompt-tokens $PP --gen $TG -t $t --reps $REPS --membw --arith $a"
      "$NEMOTRON" bench -m "$MODEL" --prompt-tokens "$PP" --gen "$TG" -t "$t" --reps "$REPS" --membw --arith "$a" \
        --json >"$RUN/nemotron_r${r}_t${t}_$a.json" 2>"$RUN/nemotron_r${r}_t${t}_$a.log" ||
        { tail -n 20 "$RUN/nemotron_r${r}_t${t}_$a.log" >&2; die "nemotron bench failed"; }
    done
  done
done

# ---------------------------------------------------------------------------- table
step "results (raw runs in $RUN)"
"$PY" - "$RUN" "$(dirname "$LLAMA_BENCH")" "$GGUF.json" "$PP" "$TG" "$LAYERS" <<'EOF'
import ctypes, glob, json, os, re, statistics, sys

run, libdir, side, pp, tg, layers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
extra = json.load(open(side))["extra_bytes_per_token"]

cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
ncpu = os.cpu_count()

try:
    lib = ctypes.CDLL(os.path.join(libdir, "libllama.so"))
    lib.llama_print_system_info.restype = ctypes.c_char_p
    sysinfo = lib.llama_print_system_info().decode()
    feats = [m.group(1) for m in re.finditer(r"(\w+) = 1", sysinfo)]
    top = next((f for f in ("AVX512", "AVX2", "AVX", "NEON", "SSE3") if f in feats), "scalar")
    ext = [f.replace("AVX512_", "") for f in feats if f.startswith("AVX512_") or f == "AVX_VNNI"]
    # ggml-cpu's NVFP4 dot (ggml_vec_dot_nvfp4_q8_0) has an AVX2 path only; activations go to Q8_0
    note = "; NVFP4 dot: avx2 nvfp4 x q8_0" if top.startswith("AVX") else ""
    llama_isa = top.lower() + (f" ({', '.join(ext)})" if ext else "") + note
    if "build-noamx" in libdir:
        llama_isa += "; AMX off (the native build's AMX kernels died with SIGILL here)"
except OSError as e:
    llama_isa = f"unknown ({e})"

llama = {}  # (threads, 'pp'|'tg') -> [best tok/s per round]
for f in sorted(glob.glob(f"{run}/llama_r*.json")):
    for t in json.load(open(f)):
        kind = "pp" if t["n_prompt"] > 0 else "tg"
        best = max(t["samples_ts"]) if t.get("samples_ts") else t["avg_ts"]
        llama.setdefault((t["n_threads"], kind), []).append(best)
nem, bw, bpt, isa, pattern = {}, {}, None, {}, None
paired = {}  # (threads, arith) -> nemotron's repetitions, each against its own probes around it
for f in sorted(glob.glob(f"{run}/nemotron_r*_t*.json")):
    j = json.load(open(f))
    th, ar = j["threads"], j.get("arith", "f32")
    nem.setdefault((th, ar, "pp"), []).append(j["prefill_tok_s"])
    nem.setdefault((th, ar, "tg"), []).append(j["decode_tok_s"])
    bw[th] = max(bw.get(th, 0.0), j["read_bandwidth_gb_s"])
    paired.setdefault((th, ar), []).extend(j.get("roofline_fraction_paired", {}).get("runs", []))
    bpt, pattern = j["decode_gb_per_token"], j["layers"]
    isa[ar] = j.get("kernel", j["isa"])  # the packed products' kernel (bench --json), else the ISA

med = lambda v: statistics.median(v) if v else float("nan")
bpt_llama = bpt + extra / 1e9
rounds = max(len(v) for v in nem.values())
print(f"\nmachine   {cpu}, {ncpu} CPUs")
print(f"model     synthetic Lightning width, {layers} layers {pattern}; ModelOpt NVFP4 checkpoint vs its GGUF")
print(f"bytes     per decoded token: nemotron {bpt:.3f} GB, llama.cpp {bpt_llama:.3f} GB "
      f"(+{extra / 1e6:.1f} MB: Q8_0 Mamba projections, F32 router)")
print(f"runs      pp{pp} / tg{tg}, median over {rounds} alternating rounds of each engine's best repetition\n")
print("| threads | engine | prefill tok/s | decode tok/s | decode roofline share | ISA path |")
print("|---:|---|---:|---:|---:|---|")
ariths = sorted({k[1] for k in nem}, key=lambda a: a != "f32")  # f32 first
for th in sorted(bw):
    lpp, ltg = med(llama.get((th, "pp"), [])), med(llama.get((th, "tg"), []))
    for ar in ariths:
        npp, ntg = med(nem.get((th, ar, "pp"), [])), med(nem.get((th, ar, "tg"), []))
        print(f"| {th} | nemotron --arith {ar} | {npp:.2f} | {ntg:.2f} | {100 * ntg * bpt / bw[th]:.0f} % of {bw[th]:.1f} GB/s | {isa[ar]} |")
    print(f"| {th} | llama.cpp | {lpp:.2f} | {ltg:.2f} | {100 * ltg * bpt_llama / bw[th]:.0f} % of {bw[th]:.1f} GB/s | {llama_isa} |")
    for ar in ariths:
        npp, ntg = med(nem.get((th, ar, "pp"), [])), med(nem.get((th, ar, "tg"), []))
        print(f"| {th} | nemotron {ar} / llama | {npp / lpp:.2f}x | {ntg / ltg:.2f}x | | |")
print()
for th in sorted(bw):
    for kind, name in (("pp", "prefill"), ("tg", "decode")):
        b = ", ".join(f"{v:.2f}" for v in llama.get((th, kind), []))
        for ar in ariths:
            a = ", ".join(f"{v:.2f}" for v in nem.get((th, ar, kind), []))
            print(f"per round  t={th} {name:7s} nemotron {ar} [{a}]  llama.cpp [{b}]")
# The table's share holds every run against the best probe of all rounds; bench --membw also holds
# each of nemotron's repetitions against the probes just before and after it (the bandwidth of
# its own minutes, which drifts by half on these VMs).
if any(paired.values()):
    print()
    for (th, ar), v in sorted(paired.items()):
        if v:
            print(f"paired     t={th} nemotron {ar}: each repetition against the probes around it, "
                  f"median {100 * med(v):.0f} % ({100 * min(v):.0f}-{100 * max(v):.0f} %, {len(v)} repetitions)")
# Interference on a shared machine only ever slows a run down, so each engine's fastest round is
# the other estimate worth reading next to the median.
print()
for th in sorted(bw):
    for kind, name in (("pp", "prefill"), ("tg", "decode")):
        lb = max(llama.get((th, kind), [float("nan")]))
        parts = [f"nemotron {ar} {max(nem[(th, ar, kind)]):.2f} ({max(nem[(th, ar, kind)]) / lb:.2f}x)"
                 for ar in ariths if nem.get((th, ar, kind))]
        print(f"best round t={th} {name:7s} " + ", ".join(parts) + f", llama.cpp {lb:.2f}")
EOF
