#!/usr/bin/env bash
# The test suite: install deps, then
#   1. release build: every unit, property, oracle (PyTorch) and text cross-check test;
#   2. ASan + UBSan build: the unit/property/bad-input tests and the PyTorch oracles (the "slow"
#      tests excluded);
#   3. fuzz: each libFuzzer target (clang) for NEMOTRON_FUZZ_SECONDS (default 10) from its seed
#      corpus (scripts/fuzz.sh), printing executions and coverage per target.
# A stage or test that does not run says so loudly (SKIPPED banner), never silently.
# Prints the ctest summaries; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/install-server-test-deps.sh  # test-only: chromium, curl, npm deps of tests/server/js
jobs=${NEMOTRON_JOBS:-$(nproc)}

skipped() {
  echo "=================================================================="
  echo "== SKIPPED: $*"
  echo "=================================================================="
}
# ctest, then a banner naming every test it did not run (a missing dependency: exit code 77).
run_ctest() {
  local dir=$1
  shift
  local log
  log=$(mktemp)
  local rc=0
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 1500 "$@") 2>&1 | tee "$log" || rc=$?
  local skips
  skips=$(grep -E '\*\*\*(Skipped|Not Run)' "$log" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+).*/\1/' || true)
  rm -f "$log"
  [ -z "$skips" ] || skipped "tests in $dir that did not run:" $skips
  return "$rc"
}

echo "== release build"
scripts/build.sh release
echo "== release tests"
run_ctest build

if [ "${NEMOTRON_SKIP_ASAN:-0}" != "1" ]; then
  echo "== sanitizer build (ASan + UBSan)"
  scripts/build.sh asan
  echo "== sanitizer tests"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Measured under ASan on 2 cores: oracle_pytorch 23 s, oracle_drafter 27 s,
  # oracle_mtp_speculative 16 s, memory_mapped_moe_pages 25 s (file-backed checkpoint pages only:
  # ASan's shadow memory and quarantine are anonymous RSS; tests/model/tests.cmake) — all run.
  # Excluded ("slow"): memory_mapped_not_copied (387 s, 236 s of it writing the 1.5 GB checkpoint,
  # and its bound is on the peak RSS, which counts ASan's shadow memory) and train_pipeline_smoke.
  # ASan looks for memory errors, not changed bits: of the exactness matrix over formats and KV
  # caches (ModelProps, GreedyLossless, DFlashGreedy; the release stage runs all of it), tiny-q
  # runs each format with the f32 cache and the dense tiny configs the bf16 / fp8 caches; the
  # tiny-q × bf16/fp8-cache cases (80, ~90 s more on 2 cores under ASan) are left out here.
  run_ctest build-asan -LE slow -E '/(tiny_)?q_[a-z0-9_]*_kv(bf16|fp8)'
else
  skipped "sanitizer build and tests (NEMOTRON_SKIP_ASAN=1)"
fi

if [ "${NEMOTRON_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== fuzz (libFuzzer + ASan/UBSan, clang)"
  scripts/fuzz.sh "${NEMOTRON_FUZZ_SECONDS:-10}"
else
  skipped "fuzz targets (NEMOTRON_SKIP_FUZZ=1)"
fi
echo "== all tests passed"
