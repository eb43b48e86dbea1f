#!/usr/bin/env python3
"""Every packed tile function of the kernels library issues prefetches.

The kernels' prefetches are hints with no effect on results, so no numeric test notices when the
compiler drops them, and GCC 12 did twice: it took helper functions and loops made only of
_mm_prefetch for dead code (the one-row tiles until f189b75, the NVFP4 bf16 tiles of 2+ rows until
2026-12-03, 1.2-1.5x slower for it on Zen 4). This reads the object code of the kernels library and
fails when an instantiated tile (packed::tile_z / tile_bf16_z / tile_bf16_y) has no PREFETCH
instruction, or when fewer tiles than expected are found (inlined away: look again).

Usage: check_prefetch.py LIBNEMOTRON_KERNELS.a
"""
import re
import subprocess
import sys

MIN_TILES = 40  # 55 in a GCC 12 release build (2026-12-03)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", sys.argv[1]],
                          check=True, capture_output=True, text=True).stdout
    counts: dict[str, int] = {}
    name = None
    for line in dump.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            if re.search(r"packed::tile_(z|bf16_z|bf16_y)<", name) and "::{lambda" not in name:
                counts.setdefault(name, 0)
            else:
                name = None
        elif name is not None and "prefetch" in line:
            counts[name] += 1
    missing = sorted(n for n, c in counts.items() if c == 0)
    for n in missing:
        print(f"no prefetch in {n}")
    print(f"{len(counts)} tile functions, {len(counts) - len(missing)} with prefetches")
    if len(counts) < MIN_TILES:
        print(f"expected at least {MIN_TILES} tile functions: were they inlined away?")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
