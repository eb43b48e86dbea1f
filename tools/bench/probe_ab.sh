#!/bin/sh
# Builds tools/bench/probe_ab.cpp with two variants of one kernel (docs/PERFORMANCE.md,
# "Zen 5, 12-06 early morning"): SOURCE compiled with FLAGS_A and FLAGS_B (say, -D switches of a
# scratch edit), FUNCTION (a name in nemo::kernels::detail with RangeFn's signature) renamed to
# probe_ab_a / probe_ab_b and every other kernel symbol of each object renamed apart. Needs a
# release build in BUILD (default build-dev); writes OUT (default /tmp/probe_ab).
#   tools/bench/probe_ab.sh src/kernels/linear_fp8.cpp range_fp8_bf16_avx512 "-DX=0" "-DX=1"
#   /tmp/probe_ab fp8 10304 2688 1 2 23 200
set -eu
src=$1 fn=$2 flags_a=$3 flags_b=$4 build=${BUILD:-build-dev} out=${OUT:-/tmp/probe_ab}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx="c++ -DFMT_SHARED -Isrc -O3 -DNDEBUG -ffp-contract=off -fno-math-errno -std=c++20"
$cxx $flags_a -c "$src" -o "$tmp/a.o"
$cxx $flags_b -c "$src" -o "$tmp/b.o"
sym=$(nm "$tmp/a.o" | awk -v f="$fn" '$2 == "T" && index($3, f "E") && index($3, "detail") {print $3}')
[ "$(echo "$sym" | grep -c .)" = 1 ] ||
  { echo "probe_ab.sh: not one defined symbol for $fn in $src: $sym" >&2; exit 1; }
# The renamed function's mangled name: probe_ab_a(PackedWeight const&, float const*, long, long,
# float*, long, long, long), as probe_ab.cpp declares it.
target=_Z10probe_ab_xRKN4nemo7kernels12PackedWeightEPKfllPflll
# The kernels defined here (nemo::kernels::) renamed per object, so that each object's
# instantiations stay its own (the same name in both would let the linker keep one of them).
for v in a b; do
  new=$(echo $target | sed "s/probe_ab_x/probe_ab_$v/")
  nm "$tmp/$v.o" | awk -v v="$v" -v s="$sym" -v n="$new" \
    '$2 ~ /^[TWtw]$/ && $3 ~ /4nemo7kernels/ {print $3, ($3 == s ? n : $3 "_probe_ab_" v)}' > "$tmp/names"
  objcopy --redefine-syms="$tmp/names" "$tmp/$v.o"
done
g++ -O2 -std=c++20 -Isrc -o "$out" tools/bench/probe_ab.cpp "$tmp/a.o" "$tmp/b.o" \
  "$build/libnemotron_kernels.a" "$build/libnemotron_base.a" -lfmt
echo "$out: A = $flags_a, B = $flags_b ($sym)"
