#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs each from
# its committed seed corpus (tests/fuzz/corpus/<target>/) for SECONDS (default 10; scripts/test.sh
# runs the default, longer runs on demand). New inputs that libFuzzer keeps go to
# build-fuzz/corpus/<target>/, crashes to build-fuzz/artifacts/ (rerun one: build-fuzz/fuzz_T FILE).
# Prints each target's executions and coverage (libFuzzer's cov: / ft:); exits 1 if any crashed.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]   (targets: tests/fuzz/fuzz.cmake)
# NEMOTRON_FUZZ_SEED (default 1) fixes libFuzzer's mutation sequence so that a test run is
# reproducible; 0 draws a random seed (exploratory runs: longer, and more than one).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
seed=${NEMOTRON_FUZZ_SEED:-1}
shift || true
jobs=${NEMOTRON_JOBS:-$(nproc)}
# -O1 -g with assertions on (nlohmann's JSON_ASSERT among them): fast enough, and a misuse aborts.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_COMPILER=clang++ -DNEMOTRON_FUZZ=ON -DNEMOTRON_BUILD_TESTS=OFF -DNEMOTRON_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz -j "$jobs" fuzz
targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
mkdir -p build-fuzz/artifacts build-fuzz/logs
failed=()
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log=build-fuzz/logs/$t.log
  rc=0
  # First directory: where new inputs go; the committed seeds are read only.
  build-fuzz/fuzz_"$t" -seed="$seed" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/artifacts/$t-" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) .*/cov: \1 ft: \2/p' <<<"$last")
  if ((rc == 0)); then
    echo "fuzz $t: ${execs:-?} executions in ${secs} s (seed $seed), ${cov:-no coverage line}"
  else
    echo "fuzz $t: FAILED (exit $rc) after ${execs:-?} executions, ${cov:-no coverage line}; log: $log"
    grep -E 'ERROR: |SUMMARY: |Test unit written|what\(\):|runtime error' "$log" | head -6 | sed 's/^/  /'
    # The project's own frames of the first stack trace: enough to find the bug from a CI log.
    grep -E '^ +#[0-9]+ .* /.*/(src|tests)/' "$log" | head -6 | awk '{print "  " $1 " " $NF}' || true
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${secs} s each, no crash"
