#!/usr/bin/python3
"""Stand-in for `nemotron` that answers `dump --draft` with the drafter reference itself. Only for testing
run_drafter_oracle.py's plumbing end to end (synth checkpoints, NVFP4 drafters, bigram and window cases) before
or without the C++ drafter runtime:

    FAKE_NEMOTRON_REAL=build/nemotron /usr/bin/python3 tests/oracle/run_drafter_oracle.py \
        --nemotron tests/oracle/fake_drafter_engine.py

`synth` is forwarded to the real binary named by FAKE_NEMOTRON_REAL. `dump` without --draft runs
nemotron_ref.py, with --draft runs drafter_ref.py (float32, like an engine). FAKE_DRAFTER_VARIANT=<name>
(a drafter_ref.Drafter.VARIANTS key, or "noise" = 1e-3 relative noise on the base logits of every 5th round)
injects a deliberate bug: the oracle must then fail.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))


def main(argv):
    if not argv:
        print("usage: fake_drafter_engine.py synth|dump ...", file=sys.stderr)
        return 2
    if argv[0] == "synth":
        real = os.environ.get("FAKE_NEMOTRON_REAL")
        if not real:
            print("FAKE_NEMOTRON_REAL must name the real nemotron binary (for synth)", file=sys.stderr)
            return 2
        return subprocess.call([real] + argv)
    if argv[0] != "dump":
        print(f"fake engine: unsupported command {argv[0]}", file=sys.stderr)
        return 2
    args = argv[1:]
    if "--help" in args or "-h" in args:
        print("Options:\n  --model\n  --ids\n  --gen\n  --out\n  --threads\n  --draft DIR\n  --draft-max INT")
        return 0
    # drop options the references do not take
    out, i = [], 0
    while i < len(args):
        if args[i] in ("--threads", "-t"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    if "--draft" not in out:
        import nemotron_ref
        return nemotron_ref.main(out)
    import drafter_ref
    var = os.environ.get("FAKE_DRAFTER_VARIANT", "")
    extra = ["--dtype", "f32"]
    if var and var != "noise":
        extra += ["--variant", var]
    rc = drafter_ref.main(out + extra)
    if rc == 0 and var == "noise":
        prefix = out[out.index("--out") + 1]
        meta, bases, finals = drafter_ref.read_draft_dump(prefix)
        rng = np.random.default_rng(0)
        for j in range(0, len(bases), 5):
            b = bases[j]
            b += (1e-3 * np.abs(b).max()) * rng.standard_normal(b.shape).astype(np.float32)
        drafter_ref.write_draft_dump(prefix, meta["kind"], meta["gamma"], meta["vocab"], meta["tap_layers"],
                                     meta["rounds"], bases, finals)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
