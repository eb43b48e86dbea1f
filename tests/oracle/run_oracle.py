#!/usr/bin/python3
"""Oracle test: the C++ engine (`nemotron dump`) against the independent PyTorch reference.

    /usr/bin/python3 tests/oracle/run_oracle.py --nemotron build/nemotron [--keep DIR] [--model DIR]

Default: run the dequantizer unit tests and the reference self-check suite, then for each preset (tiny-a, tiny-b, tiny-c) write a synthetic
f32 checkpoint with `nemotron synth --preset NAME --dtype f32 --seed S --out DIR`, and for seeded random prompts of
1, 7 and 140 tokens (140 crosses the 128-row SSD chunk boundary) compare `nemotron dump ... --gen 64` with the
reference: every prefill/decode logit row must have max|engine-ref| / max|ref| <= 2e-5 and the 64 greedy
tokens must be identical.  The reference is teacher-forced with the engine's tokens so that every decode row
compares the same context even after a divergence; its own argmax at each step gives the reference tokens.

Storage formats: `nemotron synth --preset tiny-q --format dense|modelopt|mlx4|mlx8` write the same random model in
every format; the reference dequantizes them with its own decoders (tools/reference/nemotron_formats.py) and each is
compared as above (MTP included), plus a weight check (dequantized weights vs the dense f32 checkpoint of the same
seed: expected storage per tensor and relative RMS error bounds), a W8A8 case (`dump --fp8-static-activations` vs
the reference's parity mode) and a bf16-activation case (`dump --arith bf16` vs the reference rounding the inputs of
its NVFP4, FP8 and bf16 layers, routers aside; rows whose activations round differently on the two sides may differ by about bf16's step, so the
median row is held to the tolerance and every row to 1e-2). --formats-only runs just those; --no-formats skips them.

Grouped expert routing: tiny-b with `synth --expert-groups 4:2` (n_group 4, topk_group 2), compared as above and
against the ungrouped reference, which must differ (the grouping is visible in the logits).

--model DIR runs against an existing checkpoint instead of the presets (prompt lengths from --lens, default 7).
--keep DIR keeps checkpoints and both dumps (DIR/<case>/{engine,ref}.{json,f32}).
Last line of output: `oracle: P passed, F failed`; exit status 1 if anything failed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_ref as ref  # noqa: E402

DEFAULT_PRESETS = [("tiny-a", 101), ("tiny-b", 202), ("tiny-c", 303)]
DEFAULT_LENS = [1, 7, 140]
# Extra cases beyond the f32 matrix: half-precision weight storage (widened to f32 by both sides), a sharded
# checkpoint (model.safetensors.index.json), and a prompt crossing two 128-row SSD chunk boundaries.
EXTRA_CASES = [
    dict(name="tiny-b", seed=212, dtype="bf16", synth_args=["--shard-gb", "0.001"], lens=[140], tag="bf16-sharded"),
    dict(name="tiny-c", seed=313, dtype="f16", synth_args=[], lens=[300], tag="f16"),
]
# Grouped expert routing (nemotron_h.md §5.2, n_group > 1): tiny-b's 16 experts in 4 groups of 4, the 2 best groups
# kept, top-4 among their 8 experts. The contrast (the same engine dump vs the reference with n_group = 1) must differ
# by >> tol, so the case fails if the engine ignored the grouping.
GROUPED_CASES = [
    dict(name="tiny-b", seed=222, dtype="f32", synth_args=["--expert-groups", "4:2"], lens=[7, 140], tag="grouped-4:2",
         contrast_cfg=dict(n_group=1, topk_group=1), contrast_label="the ungrouped (n_group=1) reference"),
]
# Every storage format from the same random model (`nemotron synth --preset tiny-q --format F`, every width a
# multiple of 64, pattern M*EM-E with MTP): the reference dequantizes with its own decoders (nemotron_formats.py)
# and runs the f32 forward on the dequantized weights; the engine runs the checkpoint as it loads it.
# dense bf16 is the control. fp8_static: engine `dump --fp8-static-activations` vs the reference's W8A8 parity mode.
QFMT_SEED = 404
FORMAT_CASES = [
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="dense", synth_args=[], lens=[7, 140], tag="dense"),
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="modelopt", synth_args=[], lens=[1, 7, 140],
         tag="modelopt"),
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="mlx4", synth_args=[], lens=[1, 7, 140], tag="mlx4"),
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="mlx8", synth_args=[], lens=[7, 140], tag="mlx8"),
    dict(name="tiny-q", seed=QFMT_SEED + 1, dtype="bf16", fmt="mlx4", synth_args=["--mlx-group", "32"], lens=[7],
         tag="mlx4-g32"),
    dict(name="tiny-q", seed=QFMT_SEED + 2, dtype="bf16", fmt="mlx8", synth_args=["--mlx-group", "32"], lens=[7],
         tag="mlx8-g32"),   # (g128 is impossible for tiny-q: moe_intermediate_size 64)
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="modelopt", synth_args=[], lens=[7, 140], tag="modelopt-w8a8",
         fp8_static=True),
    dict(name="tiny-q", seed=QFMT_SEED, dtype="bf16", fmt="modelopt", synth_args=[], lens=[1, 7, 140],
         tag="modelopt-actbf16", bf16_act=True, flips=dict(min_lead=3, median=5e-3)),
    # (min_lead 5 / median 2e-3 until the bf16 layers (attention, the dense MLP, MTP's eh_proj) rounded their inputs
    # too: with twice the rounding sites, flips begin sooner and every later row drifts further: median 3.1-4.2e-3
    # at 140 tokens, against 4.4-5.1e-3 from the f32-activation reference; the first rows still agree to tol.)
]
# Relative RMS error bound of the dequantized weights of each format vs the dense f32 checkpoint of the same seed
# (formats.md §6.4: NVFP4 ~9.5 %, FP8 ~2.6 %, affine-4 ~9-12 %, affine-8 ~1 %); "bf16"/"f32" = stored unquantized.
WEIGHT_RMS_BOUNDS = {"nvfp4": 0.12, "fp8": 0.035, "mlx4": 0.12, "mlx8": 0.012, "bf16": 0.004, "f32": 1e-7}

# Checkpoints written by THIS side (tests/oracle/test_reference_selfcheck.py generator + the reference's own
# safetensors writer), not by `nemotron synth`: exercises the engine's loader on config/tensor-name variants the
# spec says must be accepted (nemotron_h.md §7, §8.2 #12) and a finite time_step_limit.
OWN_CASES = [
    dict(name="own-pattern", seed=77, lens=[140], tag="",
         cfg=dict(pattern="M*EM-E*M", H=40, V=150, NH=6, P=5, G=3, N=7, K=4, HQ=6, HKV=3, HD=7, E=7, topk=3,
                  F=9, FS=11, inter=13, use_list=False),
         extra_cfg={"time_step_limit": [0.05, 0.2]}, model_prefix=True),
    dict(name="own-layertypes", seed=78, lens=[7], tag="",
         cfg=dict(pattern="*M-EM", H=24, V=64, NH=2, P=6, G=2, N=5, K=3, HQ=4, HKV=1, HD=5, E=5, topk=2,
                  F=7, FS=6, inter=10),
         layer_types=True),
]


def write_own_checkpoint(d, spec):
    import test_reference_selfcheck as sc
    cfg = sc.make_config(**spec["cfg"])
    tensors = sc.make_tensors(cfg, seed=spec["seed"])
    cfg.update(spec.get("extra_cfg", {}))
    if spec.get("layer_types"):
        names = {"M": "linear_attention", "*": "full_attention", "E": "moe", "-": "mlp"}
        cfg.pop("layers_block_type", None)
        cfg["layer_types"] = [names[ch] for ch in spec["cfg"]["pattern"]]
    if spec.get("model_prefix"):
        tensors = {("model." + k[len("backbone."):] if k.startswith("backbone.") else k): v
                   for k, v in tensors.items()}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)  # writes bare Infinity for time_step_limit, as HF does
    ref.write_safetensors(os.path.join(d, "model.safetensors"), tensors)


def row_rel_errors(eng, refm):
    """Per-row max|a-b| / max|b| (b = reference)."""
    a = eng.astype(np.float64)
    b = refm.astype(np.float64)
    num = np.max(np.abs(a - b), axis=1) if a.size else np.zeros(0)
    den = np.max(np.abs(b), axis=1) if b.size else np.zeros(0)
    den = np.where(den > 0, den, 1.0)
    out = num / den
    out[~np.isfinite(num)] = np.inf
    return out


def top2(row):
    order = np.argsort(-row.astype(np.float64), kind="stable")
    return int(order[0]), float(row[order[0]]), int(order[1]), float(row[order[1]])


def run_cmd(cmd, timeout):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), time.time() - t0


class Case:
    def __init__(self, name):
        self.name = name
        self.ok = True
        self.lines = []

    def fail(self, msg):
        self.ok = False
        self.lines.append("  FAIL: " + msg)

    def info(self, msg):
        self.lines.append("  " + msg)

    def report(self):
        """Print PASS/FAIL with the case's lines; returns whether it passed."""
        print(("PASS " if self.ok else "FAIL ") + self.name)
        for line in self.lines:
            print(line)
        sys.stdout.flush()
        return self.ok


def compare_case(case, args, model_dir, model32, prompt, work, dump_args=(), ref_kw=None, contrast=None,
                 contrast_label="the W8A16 reference", tol=None, flips=None):
    """ref_kw: the reference's mode arguments (fp8_static, bf16_act), for the diagnosis; tol: this case's logit
    tolerance (default --tol). flips: for modes that round activations (bf16): the two sides' f32 activations
    differ in their last bits, so now and then one lands on the other side of a rounding boundary; through the
    recurrent state (the FP8 Mamba projections round their inputs) every later row then drifts by about the
    rounding step, and a router that picks another expert moves a row further. So the rows must agree to tol
    from the start until the first flip, for at least flips["min_lead"] rows of prefill then decode (a wrong set
    of rounded layers differs from the first row on), and each part's median row stays within flips["median"];
    the contrast must differ in the median."""
    tol = args.tol if tol is None else tol
    lead = {}  # sequence -> rows within tol from its start until the first that is not

    def check_rows(errs, what, limit, seq=None, before=0):
        """seq names a sequence of parts in time order (prefill, then decode); before = its rows in earlier parts."""
        bad = np.nonzero(errs > limit)[0]
        if flips is not None and seq is not None and lead.get(seq, before) == before:
            lead[seq] = before + (int(bad[0]) if len(bad) else len(errs))
        if not len(bad):
            return
        if flips is not None:
            med, mx = float(np.median(errs)), float(errs.max())
            case.info(f"{what}: {len(bad)}/{len(errs)} rows exceed {limit:g} (rounding flips; the first at row "
                      f"{bad[0]}), median {med:.2e}, max {mx:.2e}")
            if med > flips["median"]:
                case.fail(f"{what}: too far for rounding flips: median {med:.2e} (<= {flips['median']:g})")
            return
        case.fail(f"{len(bad)}/{len(errs)} {what} rows exceed {limit:g}; first at row {bad[0]} "
                  f"(rel {errs[bad[0]]:.3e}); rows: {bad[:12].tolist()}{' ...' if len(bad) > 12 else ''}")

    def check_lead(seq, total):
        if flips is None or seq not in lead:
            return
        want = min(flips["min_lead"], total)
        case.info(f"{seq}: the first {lead[seq]} rows within tolerance (>= {want} required)")
        if lead[seq] < want:
            case.fail(f"{seq}: only the first {lead[seq]} rows agree before the rounding flips start "
                      f"(>= {want}): not the rounding of the mode under test")
    os.makedirs(work, exist_ok=True)
    pe = os.path.join(work, "engine")
    pr = os.path.join(work, "ref")
    ids = ",".join(str(x) for x in prompt)
    cmd = [args.nemotron, "dump", "--model", model_dir, "--ids", ids, "--gen", str(args.gen), "--out", pe]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += list(dump_args)
    want_mtp = args.engine_mtp and model32.cfg.n_mtp > 0
    if want_mtp:
        cmd += ["--mtp-dump"]
    try:
        rc, out, te = run_cmd(cmd, args.timeout)
    except subprocess.TimeoutExpired:
        case.fail(f"engine dump timed out after {args.timeout}s: {' '.join(cmd)}")
        return
    if rc != 0:
        case.fail(f"engine dump exited {rc}: {' '.join(cmd)}\n" + "\n".join("    | " + l for l in out.splitlines()[-15:]))
        return
    try:
        meta, epre, edec = ref.read_dump(pe)
    except Exception as e:  # noqa: BLE001
        case.fail(f"cannot read engine dump {pe}.json/.f32: {e}")
        return
    T = len(prompt)
    V = model32.cfg.V
    problems = []
    if meta.get("prompt") != prompt:
        problems.append(f"prompt in engine json differs ({str(meta.get('prompt'))[:80]})")
    if meta.get("vocab") != V:
        problems.append(f"vocab {meta.get('vocab')} != {V}")
    if meta.get("prefill_rows") != T:
        problems.append(f"prefill_rows {meta.get('prefill_rows')} != {T}")
    if meta.get("decode_rows") != args.gen - 1:
        problems.append(f"decode_rows {meta.get('decode_rows')} != {args.gen - 1}")
    etoks = [int(x) for x in meta.get("tokens", [])]
    if len(etoks) != args.gen:
        problems.append(f"{len(etoks)} tokens, expected {args.gen}")
    if problems:
        for p in problems:
            case.fail("engine dump format: " + p)
        return
    t0 = time.time()
    model32.fp8_stats = {}
    rpre, rtoks, rdec, rhid = ref.greedy(model32, prompt, args.gen, force_tokens=etoks, return_hidden=True)
    tr = time.time() - t0
    ref.write_dump(pr, prompt, rtoks, V, rpre, rdec)

    ep = row_rel_errors(epre, rpre)
    ed = row_rel_errors(edec, rdec)
    wp = int(np.argmax(ep))
    msg = f"prefill max rel {ep[wp]:.2e} (row {wp}/{T})"
    if len(ed):
        wd = int(np.argmax(ed))
        msg += f", decode max rel {ed[wd]:.2e} (row {wd}/{len(ed)})"
    case.info(msg + f"  [engine {te:.1f}s, ref {tr:.1f}s]")
    if not np.all(np.isfinite(epre)) or not np.all(np.isfinite(edec)):
        case.fail("engine logits contain NaN/Inf")
    check_rows(ep, "prefill", tol, seq="logits")
    check_rows(ed, "decode", tol, seq="logits", before=len(ep))  # decode row i is position T + i
    check_lead("logits", len(ep) + len(ed))
    if want_mtp:
        # MTP head (nemotron_h.md §6.2): slot i gets (h_i, t_{i+1}); the last slot gets the engine's first greedy token
        rm = ref.mtp_dump(model32, prompt, etoks, rhid)
        with open(pr + ".mtp.f32", "wb") as f:
            f.write(np.ascontiguousarray(rm, dtype="<f4").tobytes())
        try:
            em = np.fromfile(pe + ".mtp.f32", dtype="<f4")
            em = em.reshape(T, V)
        except Exception as e:  # noqa: BLE001
            case.fail(f"cannot read engine MTP dump {pe}.mtp.f32 as [{T}, {V}]: {e}")
        else:
            errs = row_rel_errors(em, rm)
            w = int(np.argmax(errs))
            case.info(f"MTP max rel {errs[w]:.2e} (slot {w}/{T})")
            check_rows(errs, "MTP", args.mtp_tol, seq="MTP")
            check_lead("MTP", len(errs))
    if contrast is not None:
        # the mode under test must matter: the same engine dump vs a reference WITHOUT it differs by >> tol
        cpre, _, cdec = ref.greedy(contrast, prompt, args.gen, force_tokens=etoks)
        crows = np.concatenate([row_rel_errors(epre, cpre), row_rel_errors(edec, cdec)])
        # with rounding flips allowed, the median row is what must tell the modes apart
        cerr = float(np.median(crows)) if flips is not None else crows.max(initial=0)
        st = model32.fp8_stats
        nq, nc = sum(v[0] for v in st.values()), sum(v[1] for v in st.values())
        case.info(f"vs {contrast_label}: {'median' if flips is not None else 'max'} rel {cerr:.2e} (the mode is visible)" +
                  (f"; {len(st)} FP8 modules, {nq} activations quantized, {nc} clamped at +-448" if st else ""))
        if cerr < 100 * tol:
            case.fail(f"engine output is as close to {contrast_label} ({cerr:.2e}) as to the one under test: "
                      f"the mode ({' '.join(dump_args) or 'config'}) seems to have no effect")
    # greedy tokens
    div = next((j for j in range(args.gen) if etoks[j] != rtoks[j]), None)
    if div is None:
        case.info(f"greedy tokens: {args.gen}/{args.gen} identical")
    else:
        erow = epre[-1] if div == 0 else edec[div - 1]
        rrow = rpre[-1] if div == 0 else rdec[div - 1]
        ei, ev, ej, ew = top2(erow)
        ri, rv, rj, rw = top2(rrow)
        msg = (f"greedy tokens diverge at generated token {div} (position {T + div}): engine {etoks[div]} vs "
               f"ref {rtoks[div]}; engine top2 {ei}:{ev:.6g} {ej}:{ew:.6g} (margin {ev - ew:.3e}); "
               f"ref top2 {ri}:{rv:.6g} {rj}:{rw:.6g} (margin {rv - rw:.3e})")
        # With rounding flips, a near-tie may fall either way: each side's gap between the two tokens within the
        # flips' median drift of its row's scale is a flip, not a bug (the reference follows the engine's tokens).
        a_tok, b_tok = int(etoks[div]), int(rtoks[div])
        near = flips is not None and all(
            abs(float(row[a_tok]) - float(row[b_tok])) <= flips["median"] * float(np.abs(row).max())
            for row in (erow, rrow))
        if near:
            case.info(msg + " -- a near-tie within the rounding flips' drift")
        else:
            case.fail(msg)
    if not case.ok and args.diagnose:
        diagnose(case, model_dir, prompt, etoks, epre, edec, rpre, rdec, args, ref_kw)


def diagnose(case, model_dir, prompt, etoks, epre, edec, rpre, rdec, args, ref_kw=None):
    """On failure: (1) compare both sides with an f64 reference to say which one is off; (2) report router
    near-ties (a flipped expert choice explains a large but legitimate difference); (3) find which deliberately
    wrong reference variant (known pitfalls, nemotron_h.md §8.2) the engine output resembles most."""
    try:
        cfg, tensors = ref.load_checkpoint(model_dir)
        m64 = ref.NemotronH(cfg, tensors, dtype=torch.float64, **(ref_kw or {}))
        m64.route_gaps = []
        p64, _, d64 = ref.greedy(m64, prompt, args.gen, force_tokens=etoks)

        def err(pre, dec, pre_ref, dec_ref):
            return max(row_rel_errors(pre, pre_ref).max(initial=0), row_rel_errors(dec, dec_ref).max(initial=0))

        e_eng = err(epre, edec, p64, d64)
        e_ref = err(rpre, rdec, p64, d64)
        verdict = "ENGINE is off" if e_eng > 10 * max(e_ref, 1e-7) else "unclear (both drift)"
        case.info(f"diagnosis vs f64 reference: engine max rel {e_eng:.3e}, f32 reference max rel {e_ref:.3e} "
                  f"-> {verdict}")
        case.info(f"model layer pattern: {''.join(m64.cfg.kinds)}")
        if m64.route_gaps:
            lay, gap = min(m64.route_gaps, key=lambda x: x[1])
            case.info(f"smallest router top-k selection margin: {gap:.3e} ({lay.rstrip('.')})"
                      + ("  <- near-tie: expert choice may legitimately flip" if gap < 1e-5 else ""))
        if e_eng > 1e-3:
            base = err(epre, edec, rpre, rdec)
            scores = []
            for var in sorted(ref.NemotronH.VARIANTS):
                try:
                    mv = ref.NemotronH(cfg, tensors, dtype=torch.float32, variants=[var], **(ref_kw or {}))
                    vp, _, vd = ref.greedy(mv, prompt, args.gen, force_tokens=etoks)
                    scores.append((err(epre, edec, vp, vd), var))
                except Exception:  # noqa: BLE001
                    pass
            scores.sort()
            if scores:
                e_best, best = scores[0]
                if e_best < 0.1 * base:
                    case.info(f"engine output matches the WRONG variant '{best}' (max rel {e_best:.2e} vs "
                              f"{base:.2e} for the spec reference): {ref.NemotronH.VARIANTS[best]}")
                else:
                    case.info("no single known-pitfall variant explains it; closest: " +
                              ", ".join(f"{v} {e:.2e}" for e, v in scores[:3]) + f" (spec ref {base:.2e})")
    except Exception as e:  # noqa: BLE001
        case.info(f"diagnosis failed: {e}")


def expected_storage(fmt, name):
    """Which storage the synthetic writer must use for a logical weight in each format (formats.md §2.8, §5.4):
    ModelOpt = Lightning release (NVFP4 routed + shared experts and lm_head, FP8 Mamba in/out_proj, rest and all
    mtp.* unquantized); MLX = every Linear (incl. stacked experts, MTP) + embeddings + lm_head quantized, router
    gate / conv / norms / SSM params float."""
    if not name.endswith(".weight"):
        return "float"
    if fmt == "dense":
        return "float"
    if fmt == "modelopt":
        if name.startswith("mtp."):
            return "float"
        if ".experts." in name or ".shared_experts." in name or name == "lm_head.weight":
            return "nvfp4"
        if name.endswith("mixer.in_proj.weight") or name.endswith("mixer.out_proj.weight"):
            return "fp8"
        return "float"
    quant = not (name.endswith("gate.weight") or "norm" in name.rsplit(".", 2)[-2] or "conv1d" in name)
    return fmt if quant else "float"


_DENSE_CACHE = {}


def weight_check(case, args, root, preset, seed, fmt, tensors, info):
    """Dequantized weights of a format checkpoint vs the dense f32 checkpoint of the same seed: same names and
    shapes, the expected storage per tensor, relative RMS error within WEIGHT_RMS_BOUNDS."""
    key = (preset, seed)
    if key not in _DENSE_CACHE:
        d = os.path.join(root, f"{preset}-s{seed}-dense-f32")
        cmd = [args.nemotron, "synth", "--preset", preset, "--dtype", "f32", "--seed", str(seed), "--out", d]
        rc, out, _ = run_cmd(cmd, args.timeout)
        if rc != 0:
            raise RuntimeError(f"synth exited {rc}: {' '.join(cmd)}\n{out[-2000:]}")
        _DENSE_CACHE[key] = ref.load_checkpoint(d)[1]
    dense = _DENSE_CACHE[key]
    miss, extra = sorted(set(dense) - set(tensors)), sorted(set(tensors) - set(dense))
    if miss:
        case.fail(f"{len(miss)} tensors of the dense checkpoint missing after dequantization: {miss[:6]}")
    if extra:
        case.fail(f"{len(extra)} unexpected tensors: {extra[:6]}")
    worst = {}
    wrong_storage = []
    for n in sorted(set(dense) & set(tensors)):
        a, b = tensors[n].double(), dense[n].double()
        if a.shape != b.shape:
            case.fail(f"{n}: shape {list(a.shape)} vs dense {list(b.shape)}")
            continue
        st = info.get(n, {}).get("format", "?")
        exp = expected_storage(fmt, n)
        if (exp == "float") != (st in ("bf16", "f32", "f16")) or (exp != "float" and exp != st):
            wrong_storage.append(f"{n}: {st} (expected {exp})")
        r = float(torch.linalg.norm(a - b) / max(float(torch.linalg.norm(b)), 1e-30))
        if st not in worst or r > worst[st][0]:
            worst[st] = (r, n)
        bound = WEIGHT_RMS_BOUNDS.get(st)
        if bound is None or r > bound:
            case.fail(f"{n} ({st}): relative RMS error {r:.4f} vs dense f32 exceeds {bound}")
    if wrong_storage:
        case.fail(f"{len(wrong_storage)} tensors stored unexpectedly: " + "; ".join(wrong_storage[:6]))
    counts = {}
    for n in tensors:
        st = info.get(n, {}).get("format", "?")
        counts[st] = counts.get(st, 0) + 1
    case.info("max relative RMS vs dense f32: " + ", ".join(
        f"{st} {r:.4f} ({counts.get(st, 0)} tensors, worst {n})" for st, (r, n) in sorted(worst.items())))


def prompt_for(seed, length, V):
    rng = np.random.default_rng(seed * 7919 + length)
    return [int(x) for x in rng.integers(0, V, size=length)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemotron", required=True, help="path to the nemotron binary")
    ap.add_argument("--keep", default=None, help="keep checkpoints and dumps in this directory")
    ap.add_argument("--model", default=None, help="run against this existing checkpoint instead of presets")
    ap.add_argument("--presets", default=",".join(p for p, _ in DEFAULT_PRESETS),
                    help="comma list of synth presets, each NAME[:SEED[:DTYPE]] (default dtype f32)")
    ap.add_argument("--lens", default=None, help="prompt lengths (default 1,7,140; 7 with --model)")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0, help="prompt seed offset")
    ap.add_argument("--threads", type=int, default=2, help="--threads passed to the engine (0 = omit)")
    # Measured (AVX-512 machine, every case here): logits 4.2e-6, MTP head 1.7e-6; each bound is ~5x that.
    ap.add_argument("--tol", type=float, default=2e-5)
    ap.add_argument("--mtp-tol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=int, default=300, help="per engine command, seconds")
    ap.add_argument("--skip-selfcheck", action="store_true")
    ap.add_argument("--no-extra", dest="extra", action="store_false",
                    help="skip the extra bf16-sharded / f16 / 300-token cases")
    ap.add_argument("--no-formats", dest="formats", action="store_false",
                    help="skip the storage-format cases (tiny-q dense/modelopt/mlx4/mlx8, weight RMS check)")
    ap.add_argument("--formats-only", action="store_true", help="run only the storage-format cases")
    ap.add_argument("--only", default=None, help="run only the cases whose 'preset tag' contains this string")
    ap.add_argument("--no-mtp", dest="mtp", action="store_false", help="do not compare the MTP head")
    ap.add_argument("--no-diagnose", dest="diagnose", action="store_false")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    passed = failed = 0
    t_start = time.time()

    if not args.skip_selfcheck:
        import test_reference_formats as tf
        n, nf, text = tf.run()
        if nf == 0:
            print(f"PASS formats: {n} dequantizer tests (formats.md §7 test vectors, unaligned safetensors, "
                  f"ModelOpt/MLX name mapping)")
            passed += 1
        else:
            print(f"FAIL formats: {nf}/{n} dequantizer tests failed")
            print(text)
            failed += 1
        import test_reference_selfcheck as sc
        n, nf, text = sc.run()
        if nf == 0:
            print(f"PASS selfcheck: {n} reference self-consistency tests")
            passed += 1
        else:
            print(f"FAIL selfcheck: {nf}/{n} reference self-consistency tests failed")
            print(text)
            failed += 1
        sys.stdout.flush()

    if not (os.path.isfile(args.nemotron) and os.access(args.nemotron, os.X_OK)):
        print(f"FAIL engine binary not found or not executable: {args.nemotron}")
        failed += 1
        print(f"oracle: {passed} passed, {failed} failed")
        return 1

    # compare the MTP head too once the engine's dump supports it (PREFIX.mtp.f32, [prompt_len, V])
    args.engine_mtp = False
    if args.mtp:
        try:
            _, helptext, _ = run_cmd([args.nemotron, "dump", "--help"], 60)
            args.engine_mtp = "--mtp-dump" in helptext
        except Exception:  # noqa: BLE001
            pass
        if not args.engine_mtp:
            print("(engine dump has no --mtp-dump yet: MTP head not compared)")

    root = args.keep or tempfile.mkdtemp(prefix="nemotron-oracle-")
    os.makedirs(root, exist_ok=True)
    try:
        if args.model:
            targets = [dict(name=os.path.basename(os.path.normpath(args.model)) or "model", seed=None,
                            dir=args.model, lens=[int(x) for x in (args.lens or "7").split(",")], tag="")]
        else:
            lens = [int(x) for x in (args.lens or ",".join(map(str, DEFAULT_LENS))).split(",")]
            targets = []
            for item in ([] if args.formats_only else args.presets.split(",")):
                name, _, rest = item.partition(":")
                s_, _, dt = rest.partition(":")
                seed = int(s_) if s_ else dict(DEFAULT_PRESETS).get(name, 1)
                targets.append(dict(name=name, seed=seed, dtype=dt or "f32", synth_args=[], lens=lens,
                                    tag=dt if dt and dt != "f32" else ""))
            if args.extra and args.presets == ap.get_default("presets") and args.lens is None \
                    and not args.formats_only:
                targets += [dict(t) for t in EXTRA_CASES]
                targets += [dict(t) for t in OWN_CASES]
                targets += [dict(t) for t in GROUPED_CASES]
            if (args.formats or args.formats_only) and args.lens is None:
                targets += [dict(t) for t in FORMAT_CASES]
            if args.only:
                targets = [t for t in targets if args.only in f"{t['name']} {t['tag']}"]
            for t in targets:
                t["dir"] = os.path.join(root, f"{t['name']}-s{t['seed']}" + (f"-{t['tag']}" if t["tag"] else ""))

        for tgt in targets:
            name, seed, mdir = tgt["name"], tgt["seed"], tgt["dir"]
            model32 = None
            setup_err = None
            if "cfg" in tgt:
                try:
                    write_own_checkpoint(mdir, tgt)
                except Exception as e:  # noqa: BLE001
                    setup_err = f"cannot write own checkpoint {mdir}: {e}"
            elif seed is not None:
                cmd = [args.nemotron, "synth", "--preset", name, "--dtype", tgt["dtype"], "--seed", str(seed),
                       "--out", mdir] + tgt["synth_args"]
                if tgt.get("fmt"):
                    cmd += ["--format", tgt["fmt"]]
                try:
                    rc, out, _ = run_cmd(cmd, args.timeout)
                    if rc != 0:
                        setup_err = f"synth exited {rc}: {' '.join(cmd)}\n" + \
                            "\n".join("    | " + l for l in out.splitlines()[-15:])
                except subprocess.TimeoutExpired:
                    setup_err = f"synth timed out: {' '.join(cmd)}"
            ref_kw = {}
            if setup_err is None:
                try:
                    cfg, tensors, info = ref.load_checkpoint(mdir, return_info=True)
                    if tgt.get("fp8_static"):
                        ref_kw["fp8_static"] = ref.fp8_static_from_info(info)
                        if not ref_kw["fp8_static"]:
                            raise ValueError("no FP8 module with an input_scale: nothing for the W8A8 mode to test")
                    if tgt.get("bf16_act"):
                        ref_kw["bf16_act"] = ref.bf16_act_names_from_info(info, fp8_static=bool(tgt.get("fp8_static")))
                        if not any(info[k].get("format") == "fp8" for k in ref_kw["bf16_act"]) or \
                                not any(info[k].get("format") == "nvfp4" for k in ref_kw["bf16_act"]):
                            raise ValueError("the bf16-activation mode needs NVFP4 and FP8 modules to test")
                    model32 = ref.NemotronH(cfg, tensors, dtype=torch.float32, **ref_kw)
                except Exception as e:  # noqa: BLE001
                    setup_err = f"reference cannot load {mdir}: {e}\n" + traceback.format_exc(limit=3)
            if tgt.get("fmt") and not tgt.get("fp8_static") and not tgt.get("bf16_act"):
                wcase = Case(f"{name} {tgt['tag']} seed={seed} weights vs dense f32")
                if setup_err:
                    wcase.fail(setup_err.splitlines()[0])
                else:
                    try:
                        weight_check(wcase, args, root, name, seed, tgt["fmt"], tensors, info)
                    except Exception as e:  # noqa: BLE001
                        wcase.fail(f"exception: {e}\n" + traceback.format_exc())
                passed, failed = (passed + 1, failed) if wcase.report() else (passed, failed + 1)
            pattern = "".join(model32.cfg.kinds) if model32 else "?"
            for L in tgt["lens"]:
                label = f"{name}" + (f" {tgt['tag']}" if tgt["tag"] else "") + \
                    (f" seed={seed}" if seed is not None else "") + f" len={L} [{pattern}]"
                case = Case(label)
                if setup_err:
                    case.fail(setup_err)
                else:
                    try:
                        prompt = prompt_for(args.seed + (seed or 0), L, model32.cfg.V)
                        compare_case(case, args, mdir, model32, prompt,
                                     os.path.join(root, os.path.basename(mdir) + f"-len{L}"),
                                     dump_args=(["--fp8-static-activations"] if tgt.get("fp8_static") else []) +
                                     (["--arith", "bf16"] if tgt.get("bf16_act") else []),
                                     ref_kw=ref_kw,
                                     contrast=ref.NemotronH(cfg, tensors)
                                     if tgt.get("fp8_static") or tgt.get("bf16_act") else
                                     ref.NemotronH(dict(cfg, **tgt["contrast_cfg"]), tensors)
                                     if tgt.get("contrast_cfg") else None,
                                     contrast_label=tgt.get("contrast_label",
                                                            "the f32-activation reference" if tgt.get("bf16_act")
                                                            else "the W8A16 reference"),
                                     tol=tgt.get("tol"), flips=tgt.get("flips"))
                    except Exception as e:  # noqa: BLE001
                        case.fail(f"exception: {e}\n" + traceback.format_exc())
                if case.report():
                    passed += 1
                else:
                    failed += 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"(kept files in {root})")
    print(f"(total {time.time() - t_start:.1f}s)")
    print(f"oracle: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
