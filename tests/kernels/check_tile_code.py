#!/usr/bin/env python3
"""The tile functions of the kernels library: prefetches present, accumulators in registers.

Prefetches are hints with no effect on results, so no numeric test notices when the compiler drops
one, and GCC 12 does, depending on the code around it: it takes helper functions and loops made
only of _mm_prefetch for dead code (the one-row tiles before f189b75, the 2-row remainder tile at
7194cbb, every NVFP4 bf16 tile of 2+ rows in one experimental build). Nor does any numeric test
notice accumulators kept on the stack: written as asm with a memory operand ("m"(*p) of a char),
a prefetch made GCC store every accumulator of a tile before it, each step (e2bf584: 4- and 8-row
passes 1.5x and 1.8x slower), and without `#pragma GCC unroll` on its loops tile_bf16_y (Zen 4's
1-2-row NVFP4 bf16 tile) stored its 8-16 accumulators each step from d434c22 on (1.3-1.4x slower),
unseen here because it was inlined and addressed its frame through %rbp.

This reads the object code and fails when an AVX-512 streaming tile (packed::tile_z /
tile_bf16_z / tile_bf16_y) has no PREFETCH instruction, when the main loop (the conditional back
edge over the most packed dot products / FMAs) of any tile, those and the AVX2 and wide-prefill
ones, stores more vector registers to the stack (via %rsp or %rbp) than allowed or calls a
function (a decoder GCC did not inline: with GFNI's intrinsic, whose target option tile_z lacks, the
FP8 tiles called their decoder once per 16 weights), or when a tile family has fewer instantiations
than expected (inlined away: the tiles are [[gnu::noinline]]).

Usage: check_tile_code.py LIBNEMOTRON_KERNELS.a
"""
import re
import subprocess
import sys

# Tile families: (name pattern, instantiations expected in a release build, prefetch required).
FAMILIES = {
    # 7 row counts x 2 widths x 6 decoders (NVFP4, FP8 and Intel's FP8, bf16 / f16 / f32), 8
    # rows x 2 widths in the 6 that Intel's kernels use (FP8's half-float decode under DAZ; NVFP4's
    # 8-row widths are 3 and 1, and it adds 2 x 8 and 3 x 6: Nvfp4IntelTiles), and
    # 1-8 rows x 2 widths of Intel's FP8 on activations times 2^112, and Intel's NVFP4 4 rows x 4
    # and 1 outputs again with the table rows by scale bytes (tile_z's ScaleBytes = true), and
    # Intel's FP8 by GFNI: 1-7 rows x 4 and 1 outputs, 8 rows x 3 and 1 (Fp8GfniTiles)
    "tile_z": (r"packed::tile_z<", 130, True),
    # 8 row counts x 2 widths x 5 decoders: NVFP4 (select, shift, shift by scale words), FP8, bf16
    "tile_bf16_z": (r"packed::tile_bf16_z<", 80, True),
    "tile_bf16_y": (r"packed::tile_bf16_y<", 8, True),  # 1-4 rows x 2 widths, NVFP4 (Zen 4)
    "tile_f32z": (r"packed::tile_f32z<", 24, False),  # wide passes, 1-6 rows x 1-4 outputs (L1)
    "tile_avx2": (r"::tile_avx2<", 6, False),  # dense AVX2: 3 formats x 1 or 4 rows
    "tile_bf16_avx2": (r"::tile_bf16_avx2<", 6, False),  # NVFP4 bf16 AVX2 (16 ymm)
    # FP8 and dense bf16 with bf16 activations on AVX2: 1-4 rows x 1-2 outputs, 2 formats
    "tile_kord_bf16_avx2": (r"::tile_kord_bf16_avx2<", 12, False),
}
MAX_LOOP_STORES = 2  # a spilled register or two at 8 rows x 3 outputs
# AVX2 has 16 ymm: the 2-row x 2-output pair tiles hold 8 accumulators plus the decode's
# temporaries and spill some (no AVX2-only machine at hand to measure another shape on).
KNOWN_SPILLS = {r"tile_bf16_avx2<2, 2>": 8, r"Fp8Bf16Avx2, 2, 2>": 4, r"DenseBf16Avx2, 2, 2>": 4,
                # AVX-512 f32 tiles of 6-7 rows x 4 outputs (24-28 accumulators) beside the
                # decode's registers; faster than the 4-row groups they replace all the same
                # (Zen 4, docs/PERFORMANCE.md, 2026-12-05: 7 rows NVFP4 1.06-1.11x, FP8 1.18-1.21x).
                # (6 x 4 NVFP4: 7 since its 24 finishes go sixteen at a time, finish_tile_z; still
                # 0.96x the time, L2-resident and streamed, Xeon 2026-12-07.)
                r"Nvfp4Avx512, 6, 4, false>": 7, r"Nvfp4Avx512, 7, 4, false>": 23,
                r"Fp8Avx512, 7, 4, false>": 3, r"Fp8Avx512Intel, 7, 4, false>": 3,
                # GFNI's FP8 decode (two registers of constants): 7 rows 0.94x the time of the
                # three-uop decode's 7 x 4 all the same (Xeon, docs/PERFORMANCE.md, 2026-12-06).
                r"Fp8Avx512IntelScaledXGfni, 7, 4, false>": 3,
                # Intel's 8 x 4 tiles (32 accumulators): 0.74-0.84x the time of two 4-row groups
                # all the same (Xeon, docs/PERFORMANCE.md, 2026-12-06). NVFP4's 8 rows run as
                # 8 x 3 (its 8 x 4 stored 60 a step of 8 blocks), within MAX_LOOP_STORES.
                r"Fp8Avx512Intel, 8, 4, false>": 7, r"Fp8Avx512IntelScaledX, 8, 4, false>": 7,
                r"Fp8Avx512, 8, 4, false>": 7,
                **{f"DenseAvx512<(nemo::kernels::WeightFormat){f}>, 8, 4, false>": 5 for f in range(3)}}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", sys.argv[1]],
                          check=True, capture_output=True, text=True).stdout
    tiles: dict[str, tuple[str, list[tuple[int, str]]]] = {}
    body = None
    for line in dump.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            family = next((f for f, (p, _, _) in FAMILIES.items() if re.search(p, name)), None)
            if family is None or "{lambda" in name:
                body = None
            else:
                body = tiles.setdefault(name, (family, []))[1]
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
        if m and body is not None:
            body.append((int(m.group(1), 16), m.group(2)))
    bad = 0
    for name, (family, ins) in sorted(tiles.items()):
        if FAMILIES[family][2] and not any("prefetch" in t for _, t in ins):
            print(f"no prefetch in {name}")
            bad += 1
        dots = [a for a, t in ins if re.match(r"(vdpbf16ps|vfmadd\w*ps)\s.*%[yz]mm", t)]
        loop = None  # (dots, -span, start, end)
        for a, t in ins:
            m = re.match(r"j(?!mp)\w+\s+([0-9a-f]+)", t)
            if m and int(m.group(1), 16) < a:
                start = int(m.group(1), 16)
                n = sum(1 for d in dots if start <= d <= a)
                if n and (loop is None or (n, start - a) > loop[:2]):
                    loop = (n, start - a, start, a)
        if loop is None:
            print(f"no main loop found in {name}")
            bad += 1
            continue
        stores = sum(1 for a, t in ins if loop[2] <= a <= loop[3] and
                     re.match(r"vmov\w+\s+%[xyz]mm\d+,.*\((%rsp|%rbp)\)", t))
        allowed = next((n for p, n in KNOWN_SPILLS.items() if p in name), MAX_LOOP_STORES)
        if stores > allowed:
            print(f"{stores} vector stores to the stack per step in {name} (allowed {allowed})")
            bad += 1
        calls = [t for a, t in ins if loop[2] <= a <= loop[3] and re.match(r"call", t)]
        if calls:
            print(f"{len(calls)} calls in the main loop of {name} (a decoder not inlined?): {calls[0]}")
            bad += 1
    for family, (_, expected, _) in FAMILIES.items():
        found = sum(1 for f, _ in tiles.values() if f == family)
        if found < expected:
            print(f"{family}: {found} instantiations, expected at least {expected} (inlined?)")
            bad += 1
    print(f"{len(tiles)} tile functions, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
