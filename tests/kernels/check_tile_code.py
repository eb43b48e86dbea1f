#!/usr/bin/env python3
"""The packed tile functions of the kernels library: prefetches present, accumulators in registers.

Prefetches are hints with no effect on results, so no numeric test notices when the compiler drops
one, and GCC 12 does, depending on the code around it: it takes helper functions and loops made
only of _mm_prefetch for dead code (the one-row tiles before f189b75, the 2-row remainder tile at
7194cbb, every NVFP4 bf16 tile of 2+ rows in one experimental build). And written as asm with a
memory operand ("m"(*p) of a char), a prefetch made GCC store every accumulator of a tile to the
stack before it, each step (the asm might read them): 16 stores per step in a 4x4 tile, 4- and
8-row passes 1.5x and 1.8x slower (e2bf584 against 66eeb7b). This reads the object code and fails when
an instantiated tile (packed::tile_z / tile_bf16_z / tile_bf16_y) has no PREFETCH instruction,
when its main loop (the conditional back edge over the most packed dot products / FMAs) stores
more than 2 vector registers to the stack, or when fewer tiles than expected are found (inlined
away: look again).

Usage: check_tile_code.py LIBNEMOTRON_KERNELS.a
"""
import re
import subprocess
import sys

MIN_TILES = 40  # 55 in a GCC 12 release build (2026-12-03)
MAX_LOOP_STORES = 2  # a spilled register or two at 8 rows x 3 outputs


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", sys.argv[1]],
                          check=True, capture_output=True, text=True).stdout
    tiles: dict[str, list[tuple[int, str]]] = {}
    body = None
    for line in dump.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            wanted = re.search(r"packed::tile_(z|bf16_z|bf16_y)<", name) and "{lambda" not in name
            body = tiles.setdefault(name, []) if wanted else None
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
        if m and body is not None:
            body.append((int(m.group(1), 16), m.group(2)))
    bad = 0
    for name, ins in sorted(tiles.items()):
        if not any("prefetch" in t for _, t in ins):
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
                     re.match(r"vmov\w+\s+%[xyz]mm\d+,.*\(%rsp\)", t))
        if stores > MAX_LOOP_STORES:
            print(f"{stores} vector stores to the stack per step in {name}")
            bad += 1
    print(f"{len(tiles)} tile functions, {bad} problems")
    if len(tiles) < MIN_TILES:
        print(f"expected at least {MIN_TILES} tile functions: were they inlined away?")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
