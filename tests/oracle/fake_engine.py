#!/usr/bin/python3
"""Stand-in for the `nemotron` binary (synth + dump), built on the reference itself. Only for testing
run_oracle.py's plumbing and failure reports without the C++ engine:

    /usr/bin/python3 tests/oracle/run_oracle.py --nemotron tests/oracle/fake_engine.py

FAKE_ENGINE_BUG=<name> injects a deliberate bug into the dump (ungrouped_norm, conv_flip, bias_weights,
logit_noise) so that the failure reports can be inspected.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_ref as ref  # noqa: E402
import test_reference_selfcheck as sc  # noqa: E402

PRESETS = {
    "tiny-a": dict(pattern="M*EM-E", H=32, V=101, NH=4, P=4, G=2, N=8, E=8, topk=2, mtp=True),
    "tiny-b": dict(pattern="ME*ME-M", H=48, V=131, NH=6, P=4, G=3, N=6, HQ=6, HKV=2, HD=8, E=6, topk=3),
    "tiny-c": dict(pattern="*MEM-*E", H=40, V=89, NH=8, P=2, G=4, N=4, HQ=4, HKV=1, HD=10, E=4, topk=1),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["synth", "dump"])
    ap.add_argument("--preset")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--model")
    ap.add_argument("--ids")
    ap.add_argument("--gen", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mtp-dump", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "synth":
        cfg = sc.make_config(**PRESETS[a.preset])
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump(cfg, f)
        ref.write_safetensors(os.path.join(a.out, "model.safetensors"), sc.make_tensors(cfg, seed=a.seed))
        return 0
    bug = os.environ.get("FAKE_ENGINE_BUG", "")
    cfg, t = ref.load_checkpoint(a.model)
    if bug == "ungrouped_norm":
        orig = ref.gated_group_rmsnorm
        ref.gated_group_rmsnorm = lambda y, z, w, g, eps: orig(y, z, w, 1, eps)
    elif bug == "conv_flip":
        for k in list(t):
            if k.endswith("conv1d.weight"):
                t[k] = torch.flip(t[k], dims=[2])
    elif bug == "bias_weights":
        for k in list(t):
            if k.endswith("e_score_correction_bias"):
                t[k] = t[k] + 0.3
    m = ref.NemotronH(cfg, t)
    prompt = [int(x) for x in a.ids.split(",")]
    pre, toks, dec, hid = ref.greedy(m, prompt, a.gen, return_hidden=True)
    if a.mtp_dump:
        if bug == "mtp_concat_swap":
            t["mtp.layers.0.eh_proj.weight"] = torch.roll(t["mtp.layers.0.eh_proj.weight"], m.cfg.H, dims=1)
            m = ref.NemotronH(cfg, t)
        lg = ref.mtp_dump(m, prompt, toks, hid)
        with open(a.out + ".mtp.f32", "wb") as f:
            f.write(lg.astype("<f4").tobytes())
    if bug == "logit_noise":
        pre = pre * (1 + 1e-3)
    ref.write_dump(a.out, prompt, toks, m.cfg.V, pre, dec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
