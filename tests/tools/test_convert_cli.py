#!/usr/bin/env python3
"""`nemotron convert` from the outside: a dense f32 checkpoint (what a training pipeline writes)
converted to each published format is byte for byte what `synth` writes directly with the same
seed (synth's dense f32 output holds its logical values exactly), for targets and for DFlash /
DSpark drafters; a perturbed source is caught by the same comparison (the check's power); a
missing or misshapen tensor is an error naming the file and the tensor."""
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from clitest import CliTest  # noqa: E402
from safetensors_file import read as read_st, write as write_st  # noqa: E402

T = CliTest(sys.argv[1], "convert cli")
run, check, must = T.run, T.check, T.must


def weight_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors") or f.endswith(".index.json"))


def same_weights(a, b):
    """(equal, detail): every safetensors file (and index) of a and b, byte for byte."""
    fa, fb = weight_files(a), weight_files(b)
    if fa != fb or not fa:
        return False, f"files {fa} vs {fb}"
    for f in fa:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            if x.read() != y.read():
                return False, f"{f} differs"
    return True, ""


def edit(d, fn):
    path = os.path.join(d, "model.safetensors")
    ts, meta = read_st(path)
    write_st(path, fn(ts), meta)


def perturb(name):
    """Sets one f32 value of `name` to twice the tensor's largest magnitude (so every format changes)."""
    def fn(ts):
        for t in ts:
            if t[0] == name:
                vals = struct.unpack(f"<{len(t[3]) // 4}f", t[3])
                t[3][0:4] = struct.pack("<f", 2 * max(abs(v) for v in vals) + 1)
        return ts
    return fn


with tempfile.TemporaryDirectory() as d:
    p = lambda *x: os.path.join(d, *x)
    seed = ["--seed", "3", "--quiet"]
    must(["synth", "--preset", "tiny-q", "--dtype", "f32", "--format", "dense", "--out", p("f32")] + seed)

    # Targets: modelopt, mlx4 and dense bf16, converted vs synthesized.
    for fmt in ("modelopt", "mlx4", "dense"):
        must(["synth", "--preset", "tiny-q", "--format", fmt, "--out", p("synth-" + fmt)] + seed)
        r = run(["convert", "--from", p("f32"), "--out", p("conv-" + fmt), "--format", fmt, "--dtype", "bf16"])
        check(f"convert {fmt}", r.returncode == 0 and "convert: 100%" in r.stderr and "target from" in r.stdout,
              r.stdout + r.stderr)
        ok, detail = same_weights(p("conv-" + fmt), p("synth-" + fmt))
        check(f"convert {fmt} == synth {fmt}", ok, detail)
        check(f"convert {fmt} config.json", open(p("conv-" + fmt, "config.json")).read() ==
              open(p("synth-" + fmt, "config.json")).read())
    # The converted NVIDIA release runs (and is the synthesized one: same bytes).
    r1 = run(["run", "-m", p("conv-modelopt"), "--ids", "1,2,3", "-n", "6"])
    r2 = run(["run", "-m", p("synth-modelopt"), "--ids", "1,2,3", "-n", "6"])
    check("converted modelopt runs", r1.returncode == 0 and r1.stdout == r2.stdout, r1.stderr)

    # Drafters: dense f32 (a trained drafter) -> W4A16 NVFP4, vs synth's NVFP4 drafter.
    for kind in ("dflash", "dspark"):
        must(["synth", "--preset", "tiny-q", "--drafter", kind, "--format", "dense", "--dtype", "f32",
              "--out", p(kind + "-f32")] + seed)
        check(f"dense {kind} has no quant config", not os.path.exists(p(kind + "-f32", "hf_quant_config.json")))
        must(["synth", "--preset", "tiny-q", "--drafter", kind, "--out", p(kind + "-synth")] + seed)
        r = run(["convert", "--from", p(kind + "-f32"), "--out", p(kind + "-conv")])
        check(f"convert {kind}", r.returncode == 0 and f"{kind} from" in r.stdout, r.stdout + r.stderr)
        ok, detail = same_weights(p(kind + "-conv"), p(kind + "-synth"))
        check(f"convert {kind} == synth {kind}", ok, detail)
        for f in ("config.json", "hf_quant_config.json"):
            check(f"convert {kind} {f}", open(p(kind + "-conv", f)).read() == open(p(kind + "-synth", f)).read())
        r = run(["run", "-m", p("synth-dense"), "--draft", p(kind + "-conv"), "--ids", "4,5,6", "-n", "6"])
        check(f"converted {kind} pairs with the target", r.returncode == 0, r.stderr)

    # The comparison's power: one perturbed source value makes every output differ.
    must(["synth", "--preset", "tiny-q", "--dtype", "f32", "--format", "dense", "--out", p("bent")] + seed)
    edit(p("bent"), perturb("backbone.layers.2.mixer.experts.5.up_proj.weight"))
    for fmt in ("modelopt", "mlx4", "dense"):
        must(["convert", "--from", p("bent"), "--out", p("bent-" + fmt), "--format", fmt, "--quiet"])
        check(f"perturbed source caught ({fmt})", not same_weights(p("bent-" + fmt), p("synth-" + fmt))[0])
    edit(p("dspark-f32"), perturb("layers.1.mlp.up_proj.weight"))
    must(["convert", "--from", p("dspark-f32"), "--out", p("dspark-bent"), "--quiet"])
    check("perturbed drafter caught", not same_weights(p("dspark-bent"), p("dspark-synth"))[0])

    # Errors: exit 1, one message naming the file and the tensor, nothing loadable written.
    def expect_error(name, src, needles):
        out = p("err-" + name.replace(" ", "-"))
        T.expect_error(name, ["convert", "--from", src, "--out", out, "--quiet"], needles)
        check(name + ": nothing loadable written", not os.path.exists(os.path.join(out, "config.json")))

    must(["synth", "--preset", "tiny-q", "--dtype", "f32", "--format", "dense", "--out", p("miss")] + seed)
    gone = "backbone.layers.4.mixer.down_proj.weight"
    edit(p("miss"), lambda ts: [t for t in ts if t[0] != gone])
    expect_error("missing tensor", p("miss"), [p("miss", "model.safetensors"), f"tensor '{gone}' is missing"])
    must(["synth", "--preset", "tiny-q", "--dtype", "f32", "--format", "dense", "--out", p("shape")] + seed)
    bent = "backbone.layers.0.mixer.out_proj.weight"  # [128, 128] stored as [64, 256]
    edit(p("shape"), lambda ts: [(n, dt, [64, 256] if n == bent else s, b) for n, dt, s, b in ts])
    expect_error("wrong shape", p("shape"), [p("shape", "model.safetensors"),
                                             f"tensor '{bent}' has shape [64, 256], but config.json makes it [128, 128]"])
    expect_error("quantized source", p("synth-modelopt"), ["a quantized checkpoint"])
    expect_error("no source", p("nope"), [p("nope", "config.json")])
    r = run(["convert", "--from", p("f32"), "--out", p("x"), "--format", "mlx3"])
    check("bad format", r.returncode == 1 and "--format 'mlx3'" in r.stderr, r.stderr)
    r = run(["convert", "--from", p("dflash-f32"), "--out", p("x"), "--format", "mlx4"])
    check("drafter to mlx refused", r.returncode == 1 and "converts to modelopt (W4A16 NVFP4) or dense" in r.stderr,
          r.stderr)

T.finish()
