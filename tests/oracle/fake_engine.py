#!/usr/bin/python3
"""Stand-in for the `nemotron` binary (synth + dump), built on the reference itself. Only for testing
run_oracle.py's plumbing and failure reports without the C++ engine:

    /usr/bin/python3 tests/oracle/run_oracle.py --nemotron tests/oracle/fake_engine.py

FAKE_ENGINE_BUG=<name> injects a deliberate bug into the dump (ungrouped_norm, conv_flip, bias_weights,
logit_noise, nvfp4_nibble_swap, mlx_no_bias, ignore_fp8_static, ignore_arith, bf16_act_everywhere,
bf16_act_no_lm_head, bf16_act_nvfp4_only, bf16_act_packed_only) so that the failure reports can be inspected.
synth --format modelopt|mlx4|mlx8 writes quantized checkpoints with the quantizers of test_reference_formats.py
(dense weights rounded to bf16 first, like a release).
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
import test_reference_formats as tf  # noqa: E402
import nemotron_formats as fm  # noqa: E402
import numpy as np  # noqa: E402

PRESETS = {
    "tiny-a": dict(pattern="M*EM-E", H=32, V=101, NH=4, P=4, G=2, N=8, E=8, topk=2, mtp=True),
    "tiny-b": dict(pattern="ME*ME-M", H=48, V=131, NH=6, P=4, G=3, N=6, HQ=6, HKV=2, HD=8, E=6, topk=3),
    "tiny-c": dict(pattern="*MEM-*E", H=40, V=89, NH=8, P=2, G=4, N=4, HQ=4, HKV=1, HD=10, E=4, topk=1),
    "tiny-q": dict(pattern="M*EM-E", H=64, V=128, NH=4, P=16, G=2, N=16, HQ=4, HKV=2, HD=16, E=4, topk=2, F=64,
                   FS=64, inter=128, mtp=True),
}


def write_format(out, cfg, t, fmt, group):
    """Quantize a dense checkpoint: modelopt = NVFP4 experts/shared/lm_head + FP8 Mamba in/out_proj (mtp.* bf16);
    mlx4/mlx8 = every Linear, embedding and lm_head affine-quantized, experts stacked, conv1d [C,K,1]."""
    t = {k: v.numpy().astype(np.float32) for k, v in t.items()}
    t = {k: tf.bf16_to_f32(tf.bf16_rne_bits(v)).reshape(v.shape) for k, v in t.items()}
    st = {}
    if fmt == "modelopt":
        ql = {}
        for k, v in t.items():
            mod = k[:-len(".weight")]
            if k.startswith("mtp.") or not k.endswith(".weight"):
                st[k] = ("BF16", list(v.shape), tf.bf16_bytes(v))
            elif ".experts." in k or ".shared_experts." in k or k == "lm_head.weight":
                pk, sc_, ws2 = tf.quant_nvfp4(v)
                st[k] = ("U8", list(pk.shape), pk.tobytes())
                st[mod + ".weight_scale"] = ("F8_E4M3", list(sc_.shape), sc_.tobytes())
                st[mod + ".weight_scale_2"] = ("F32", [], np.array([ws2], "<f4").tobytes())
                ql[mod] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
            elif k.endswith("mixer.in_proj.weight") or k.endswith("mixer.out_proj.weight"):
                ws = np.float32(np.abs(v).max() / 448.0)
                q = fm.e4m3_encode_rne(v / ws)
                lut = {float(fm.E4M3_TABLE[c]): c for c in range(0x7F)}
                codes = np.array([lut[abs(float(x))] | (0x80 if x < 0 else 0) for x in q.reshape(-1)], np.uint8)
                st[k] = ("F8_E4M3", list(v.shape), codes.tobytes())
                st[mod + ".weight_scale"] = ("F32", [], np.array([ws], "<f4").tobytes())
                st[mod + ".input_scale"] = ("F32", [], np.array([0.02], "<f4").tobytes())
                ql[mod] = {"quant_algo": "FP8"}
            else:
                st[k] = ("BF16", list(v.shape), tf.bf16_bytes(v))
        with open(os.path.join(out, "hf_quant_config.json"), "w") as f:
            json.dump({"producer": {"name": "fake"}, "quantization": {
                "quant_algo": "MIXED_PRECISION", "quantized_layers": ql, "exclude_modules": ["mtp*"]}}, f)
    else:
        bits = 4 if fmt == "mlx4" else 8
        stacks = {}
        for k, v in t.items():
            leaf = k.rsplit(".", 1)[-1]
            mod = k[:-len(".weight")]
            parts = k.split(".")
            if ".experts." in k and leaf == "weight":
                i = parts.index("experts")
                key = ".".join(parts[:i]) + ".switch_mlp." + ("fc1" if parts[i + 2] == "up_proj" else "fc2")
                stacks.setdefault(key, {})[int(parts[i + 1])] = v
                continue
            if leaf == "weight" and v.ndim == 2 and not k.endswith("gate.weight"):
                stacks[mod] = {None: v}
            elif k.endswith("conv1d.weight"):
                st[k] = ("BF16", [v.shape[0], v.shape[2], 1], tf.bf16_bytes(v.transpose(0, 2, 1)))
            else:
                st[k] = ("BF16", list(v.shape), tf.bf16_bytes(v))
        for mod, d in stacks.items():
            w = d[None] if None in d else np.stack([d[e] for e in sorted(d)])
            q, s_, b_ = tf.quant_affine(w, bits, group)
            st[mod + ".weight"] = ("U32", list(q.shape), q.astype("<u4").tobytes())
            st[mod + ".scales"] = ("BF16", list(s_.shape), tf.bf16_bytes(s_))
            st[mod + ".biases"] = ("BF16", list(b_.shape), tf.bf16_bytes(b_))
        cfg = dict(cfg, quantization={"group_size": group, "bits": bits, "mode": "affine"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    tf.write_st(os.path.join(out, "model.safetensors"), st, pad=(fmt == "modelopt"), odd=(fmt != "modelopt"))


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
    ap.add_argument("--format", default="dense")
    ap.add_argument("--mlx-group", type=int, default=64)
    ap.add_argument("--fp8-static-activations", action="store_true")
    ap.add_argument("--arith", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "synth":
        cfg = sc.make_config(**PRESETS[a.preset])
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump(cfg, f)
        tensors = sc.make_tensors(cfg, seed=a.seed)
        if a.format != "dense":
            write_format(a.out, cfg, tensors, a.format, a.mlx_group)
        elif a.dtype == "f32":
            ref.write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
        else:   # bf16/f16 storage: same values rounded to bf16
            tf.write_st(os.path.join(a.out, "model.safetensors"),
                        {k: ("BF16", list(v.shape), tf.bf16_bytes(v.numpy())) for k, v in tensors.items()}, pad=True)
        return 0
    bug = os.environ.get("FAKE_ENGINE_BUG", "")
    if bug == "nvfp4_nibble_swap":
        orig_e2m1 = fm.e2m1_decode
        fm.e2m1_decode = lambda p: orig_e2m1(((np.asarray(p) >> 4) | (np.asarray(p) << 4)).astype(np.uint8))
    elif bug == "mlx_no_bias":
        orig_aff = fm.mlx_affine_dequant
        fm.mlx_affine_dequant = lambda w, s, b, bits, g, what="": orig_aff(w, s, np.zeros_like(b), bits, g)
    cfg, t, info = ref.load_checkpoint(a.model, return_info=True)
    fp8s = ref.fp8_static_from_info(info) if a.fp8_static_activations and bug != "ignore_fp8_static" else None
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
    bf16_act = (ref.bf16_act_names_from_info(info, fp8_static=a.fp8_static_activations)
                if a.arith == "bf16" and bug != "ignore_arith" else set())
    if bf16_act and bug == "bf16_act_everywhere":
        bf16_act = {k for k in t if k.endswith(".weight")}
    elif bug == "bf16_act_no_lm_head":
        bf16_act.discard("lm_head.weight")
    elif bug == "bf16_act_nvfp4_only":
        bf16_act = {k for k in bf16_act if info[k].get("format") == "nvfp4"}
    elif bug == "bf16_act_packed_only":  # the engine before bf16 layers took --arith bf16
        bf16_act = {k for k in bf16_act if info[k].get("format") in ("nvfp4", "fp8")}
    m = ref.NemotronH(cfg, t, fp8_static=fp8s, bf16_act=bf16_act)
    prompt = [int(x) for x in a.ids.split(",")]
    pre, toks, dec, hid = ref.greedy(m, prompt, a.gen, return_hidden=True)
    if a.mtp_dump:
        if bug == "mtp_concat_swap":
            t["mtp.layers.0.eh_proj.weight"] = torch.roll(t["mtp.layers.0.eh_proj.weight"], m.cfg.H, dims=1)
            m = ref.NemotronH(cfg, t, fp8_static=fp8s, bf16_act=bf16_act)
        lg = ref.mtp_dump(m, prompt, toks, hid)
        with open(a.out + ".mtp.f32", "wb") as f:
            f.write(lg.astype("<f4").tobytes())
    if bug == "logit_noise":
        pre = pre * (1 + 1e-3)
    ref.write_dump(a.out, prompt, toks, m.cfg.V, pre, dec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
