#!/usr/bin/env python3
"""Trains the `tiny-code` Nemotron-H family on the Python standard library's sources (CPU, python3-torch).

Stages (each writes into --work; `--stage` reruns from one of them):
  corpus     the *.py files of /usr/lib/python3.X, split by a hash of the path into train / held-out (1 in 20)
  tokenizer  a byte-level BPE (`nemotron tokenizer train`) and the encoded corpus (`nemotron tokenizer encode`)
  target     the Nemotron-H target with its MTP head, trained jointly: next-token CE + 0.3 x MTP CE
  drafters   the target frozen; the MTP head distilled further (chained 3 deep), then a DFlash and a DSpark drafter,
             all towards the target's own greedy token at each row of the corpus (cross-entropy; `--soft`: towards
             its whole distribution)
  export     dense f32 checkpoints -> `nemotron convert` -> ModelOpt MIXED_PRECISION, dense bf16, W4A16 NVFP4 drafters
  report     held-out perplexity, acceptance vs gamma with the C++ engine, plot.png, log.json

The model is the independent PyTorch reference (tools/reference): nemotron_ref.NemotronH for the target and MTP
head (with the chunked SSD scan, scan_chunk), drafter_ref.Drafter for DFlash/DSpark. Only the parameters, the
initialisation, the losses and the loop live here.

    /usr/bin/python3 tools/train/train.py --nemotron build/nemotron --work /tmp/tc --out models
    /usr/bin/python3 tools/train/train.py --smoke ...     # minutes-long run of every stage (CI)
"""
import argparse
import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time

# Sleeping (not spinning) OpenMP workers: with 2 cores shared with anything else, spinning threads make a step
# ~10x slower. Must be set before torch starts its thread pool.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import nemotron_ref as nref  # noqa: E402
import drafter_ref as dref  # noqa: E402

FAMILY = "tiny-code"

# The target: every Nemotron-H layer kind at a width that trains on 2 cores. Field names and shape as
# synth / config.json of the real release.
TARGET_CONFIG = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hidden_size": 256, "vocab_size": 2048, "hybrid_override_pattern": "MEM*EMEM*E",
    "mamba_num_heads": 16, "mamba_head_dim": 32, "n_groups": 2, "ssm_state_size": 32, "conv_kernel": 4,
    "expand": 2, "chunk_size": 128, "use_conv_bias": True, "use_bias": False, "mamba_hidden_act": "silu",
    "time_step_limit": [0.0, float("inf")], "time_step_min": 0.001, "time_step_max": 0.1, "time_step_floor": 0.0001,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "attention_bias": False,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256, "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 256, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "n_group": 1, "topk_group": 1, "moe_latent_size": None, "intermediate_size": 512, "mlp_bias": False,
    "mlp_hidden_act": "relu2", "num_nextn_predict_layers": 1, "mtp_layers_block_type": ["attention", "moe"],
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False, "residual_in_fp32": False,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "max_position_embeddings": 1048576,
    "rope_theta": 10000, "sliding_window": None, "mamba_ssm_cache_dtype": "float32", "torch_dtype": "bfloat16",
}
KIND_NAMES = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}

DRAFT_TAPS = [1, 5, 9]      # residual after blocks 1, 5, 9 (the last), as Lightning taps [1,5,19,29,41,51] of 52
DRAFT_BLOCK = 8             # anchor + 7 masks, the trained block of NVIDIA's drafters
MASK_ID = 990               # dflash_config.mask_token_id as in NVIDIA's configs (its drafter embedding row is trained)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# --------------------------------------------------------------------------------------------------------------
# corpus and tokenizer
# --------------------------------------------------------------------------------------------------------------

def stdlib_dir():
    cands = sorted(glob.glob("/usr/lib/python3.[0-9]*"), key=lambda p: [int(x) for x in p.split("3.")[-1].split(".")])
    cands = [c for c in cands if os.path.exists(os.path.join(c, "os.py"))]
    if not cands:
        sys.exit("no /usr/lib/python3.X with os.py: the corpus is the Python standard library's sources")
    return cands[-1]


def stage_corpus(a):
    root = stdlib_dir()
    files = []
    for dp, dns, fns in os.walk(root):
        dns[:] = sorted(d for d in dns if d not in ("site-packages", "dist-packages", "test", "tests", "__pycache__"))
        files += [os.path.join(dp, f) for f in sorted(fns) if f.endswith(".py")]
    files.sort()
    held = [f for f in files if int(hashlib.sha1(os.path.relpath(f, root).encode()).hexdigest(), 16) % 20 == 0]
    train = [f for f in files if f not in set(held)]
    if a.smoke:
        train, held = train[:40], held[:4]
    json.dump({"root": root, "train": train, "heldout": held}, open(os.path.join(a.work, "corpus.json"), "w"), indent=1)
    size = sum(os.path.getsize(f) for f in train)
    log(f"corpus: {root}, {len(train)} train files ({size / 1e6:.1f} MB), {len(held)} held-out")


def stage_tokenizer(a):
    c = json.load(open(os.path.join(a.work, "corpus.json")))
    # The BPE is trained on the training files in path order (a 200 kB slice for --smoke).
    budget = 200_000 if a.smoke else 1 << 40
    buf = bytearray()
    for f in c["train"]:
        if len(buf) >= budget:
            break
        buf += open(f, "rb").read()
    tc = os.path.join(a.work, "tok_corpus.txt")
    open(tc, "wb").write(bytes(buf[:budget]))
    tdir = os.path.join(a.work, "tokenizer")
    run([a.nemotron, "tokenizer", "train", "--corpus", tc, "--vocab", str(TARGET_CONFIG["vocab_size"]),
         "--out", tdir])
    for split in ("train", "heldout"):
        run([a.nemotron, "tokenizer", "encode", "--tokenizer", tdir, "--out",
             os.path.join(a.work, f"{split}.u32")] + c[split])


def run(cmd):
    log("$", " ".join(cmd[:8]) + (" ..." if len(cmd) > 8 else ""))
    subprocess.run(cmd, check=True)


def load_ids(a, split):
    return np.fromfile(os.path.join(a.work, f"{split}.u32"), dtype="<u4").astype(np.int64)


def batches(ids, T, B, rng):
    """B random windows of T+3 tokens (3 extra: the MTP chain's labels)."""
    starts = rng.integers(0, len(ids) - T - 3, size=B)
    return [torch.from_numpy(ids[s:s + T + 3]) for s in starts]


# --------------------------------------------------------------------------------------------------------------
# target parameters (names and shapes of the release layout) and initialisation
# --------------------------------------------------------------------------------------------------------------

def target_shapes(cfg):
    c = nref.Config(cfg)
    s = {"backbone.embeddings.weight": (c.V, c.H), "backbone.norm_f.weight": (c.H,), "lm_head.weight": (c.V, c.H)}

    def attn(p):
        s.update({p + "mixer.q_proj.weight": (c.HQ * c.HD, c.H), p + "mixer.k_proj.weight": (c.HKV * c.HD, c.H),
                  p + "mixer.v_proj.weight": (c.HKV * c.HD, c.H), p + "mixer.o_proj.weight": (c.H, c.HQ * c.HD)})

    def moe(p):
        s.update({p + "mixer.gate.weight": (c.E, c.H), p + "mixer.gate.e_score_correction_bias": (c.E,),
                  p + "mixer.shared_experts.up_proj.weight": (c.FS, c.H),
                  p + "mixer.shared_experts.down_proj.weight": (c.H, c.FS)})
        for e in range(c.E):
            s.update({p + f"mixer.experts.{e}.up_proj.weight": (c.F, c.H),
                      p + f"mixer.experts.{e}.down_proj.weight": (c.H, c.F)})

    for i, k in enumerate(c.kinds):
        p = f"backbone.layers.{i}."
        s[p + "norm.weight"] = (c.H,)
        if k == "M":
            s.update({p + "mixer.in_proj.weight": (c.DI + c.CD + c.NH, c.H), p + "mixer.conv1d.weight": (c.CD, 1, c.K),
                      p + "mixer.conv1d.bias": (c.CD,), p + "mixer.dt_bias": (c.NH,), p + "mixer.A_log": (c.NH,),
                      p + "mixer.D": (c.NH,), p + "mixer.norm.weight": (c.DI,), p + "mixer.out_proj.weight": (c.H, c.DI)})
        elif k == "*":
            attn(p)
        elif k == "E":
            moe(p)
        else:
            s.update({p + "mixer.up_proj.weight": (c.inter, c.H), p + "mixer.down_proj.weight": (c.H, c.inter)})
    s.update({"mtp.layers.0.eh_proj.weight": (c.H, 2 * c.H), "mtp.layers.0.enorm.weight": (c.H,),
              "mtp.layers.0.hnorm.weight": (c.H,)})
    for j, k in enumerate(c.mtp_kinds):
        p = f"mtp.layers.{j}."
        s[p + "norm.weight"] = (c.H,)
        attn(p) if k == "*" else moe(p)
    s[f"mtp.layers.{len(c.mtp_kinds) - 1}.final_layernorm.weight"] = (c.H,)
    return s


def init_target(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    c = nref.Config(cfg)
    out = {}
    resid_std = 0.02 / math.sqrt(2 * (c.L + len(c.mtp_kinds)))
    for name, shape in target_shapes(cfg).items():
        leaf = name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1]
        if name.endswith("norm.weight") or "layernorm" in name:
            v = torch.ones(shape)
        elif name.endswith("A_log"):
            v = torch.log(torch.empty(shape).uniform_(1.0, 16.0, generator=g))
        elif name.endswith("dt_bias"):
            dt = torch.exp(torch.empty(shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
            v = dt + torch.log(-torch.expm1(-dt))          # inverse softplus
        elif name.endswith(".D"):
            v = torch.ones(shape)
        elif name.endswith("conv1d.weight"):
            v = torch.empty(shape).uniform_(-0.5, 0.5, generator=g)
        elif name.endswith("conv1d.bias") or name.endswith("e_score_correction_bias"):
            v = torch.zeros(shape)
        elif leaf in ("out_proj.weight", "o_proj.weight", "down_proj.weight"):
            v = torch.randn(shape, generator=g) * resid_std
        else:
            v = torch.randn(shape, generator=g) * 0.02
        out[name] = v
    return out


class Target(nref.NemotronH):
    """The reference model; records how many tokens each router sends to each expert (for the bias update)."""

    def __init__(self, cfg, tensors):
        super().__init__(cfg, tensors)
        self.scan_chunk = 64
        self.loads = {}

    def route(self, hn, p):
        idx, w = super().route(hn, p)
        cnt = torch.bincount(idx.reshape(-1), minlength=self.cfg.E).to(torch.float32)
        self.loads[p] = self.loads.get(p, 0) + cnt
        return idx, w


def bias_update(model, params, rate):
    """Auxiliary-loss-free balancing (DeepSeek-V3): raise the selection bias of under-loaded experts."""
    with torch.no_grad():
        for p, cnt in model.loads.items():
            b = params[p + "gate.e_score_correction_bias"]
            b += rate * torch.sign(cnt.mean() - cnt)
    model.loads = {}


def soft_ce(logits, target_probs):
    return -(target_probs * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def distill_ce(logits, probs, greedy, hard):
    """Towards the frozen target's output at those rows: its greedy token (hard: what greedy verification accepts)
    or its whole distribution (soft)."""
    if hard:
        return torch.nn.functional.cross_entropy(logits, greedy)
    return soft_ce(logits, probs)


def cosine_lr(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))))


def make_opt(params, lr):
    """AdamW; matrices decay, except a drafter's embedding (frozen rows must stay the target's)."""
    decay = [p for n, p in params.items() if p.dim() >= 2 and n != "embed_tokens.weight"]
    rest = [p for n, p in params.items() if p.dim() < 2 or n == "embed_tokens.weight"]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


# --------------------------------------------------------------------------------------------------------------
# stage: target (+ MTP, jointly)
# --------------------------------------------------------------------------------------------------------------

def target_loss(m, seq, T, mtp_weight=0.3):
    ids = seq[:T + 1]
    h = m.hidden(ids[:T].tolist(), m.new_state())             # post-norm_f [T, H]
    ce = torch.nn.functional.cross_entropy(m.logits(h), ids[1:T + 1])
    # MTP slot i: (h_i, t_{i+1}) -> t_{i+2}
    mlog, _ = m.mtp_step(h[:T - 1], seq[1:T].tolist(), m.new_mtp_state())
    mce = torch.nn.functional.cross_entropy(mlog, seq[2:T + 1])
    return ce + mtp_weight * mce, ce.item(), mce.item()


def evaluate_target(m, ids, T, n):
    rng = np.random.default_rng(1234)
    tot, cnt, mtot = 0.0, 0, 0.0
    with torch.no_grad():
        for seq in batches(ids, T, n, rng):
            _, ce, mce = target_loss(m, seq, T)
            tot += ce
            mtot += mce
            cnt += 1
    return tot / cnt, mtot / cnt


def stage_target(a, logj):
    cfg = dict(TARGET_CONFIG)
    torch.manual_seed(a.seed)
    tensors = init_target(cfg, a.seed)
    params = {k: torch.nn.Parameter(v) for k, v in tensors.items() if not k.endswith("e_score_correction_bias")}
    bufs = {k: v for k, v in tensors.items() if k.endswith("e_score_correction_bias")}
    m = Target(cfg, {**params, **bufs})
    for k in params:   # the reference keeps our Parameter objects (same dtype): gradients reach them
        assert m.t[k] is params[k], k
    train, held = load_ids(a, "train"), load_ids(a, "heldout")
    log(f"target: {sum(p.numel() for p in params.values()) / 1e6:.2f} M parameters, {len(train)} train tokens, "
        f"{len(held)} held-out")
    T, B = a.seq, a.batch
    opt = make_opt(params, a.lr)
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    steps, hist = a.target_steps, []
    for step in range(steps):
        for gp in opt.param_groups:
            gp["lr"] = cosine_lr(step, steps, a.lr, min(100, steps // 10 + 1))
        opt.zero_grad(set_to_none=True)
        ce_s = mce_s = 0.0
        for seq in batches(train, T, B, rng):
            loss, ce, mce = target_loss(m, seq, T)
            (loss / B).backward()
            ce_s += ce / B
            mce_s += mce / B
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        bias_update(m, bufs, 1e-3)
        rec = {"step": step + 1, "train_ce": ce_s, "train_mtp_ce": mce_s, "s": time.time() - t0}
        if (step + 1) % a.eval_every == 0 or step + 1 == steps:
            rec["heldout_ce"], rec["heldout_mtp_ce"] = evaluate_target(m, held, T, 8 if a.smoke else 24)
            log(f"target step {step + 1}/{steps}: train CE {ce_s:.3f} (MTP {mce_s:.3f}), held-out CE "
                f"{rec['heldout_ce']:.3f} ppl {math.exp(rec['heldout_ce']):.2f}, {time.time() - t0:.0f} s, "
                f"{(step + 1) * B * T / (time.time() - t0):.0f} tok/s")
        hist.append(rec)
    logj["target"] = hist
    save_dense(os.path.join(a.work, "target-f32"), cfg, {k: v.detach() for k, v in m.t.items()},
               tok=os.path.join(a.work, "tokenizer"))


def save_dense(d, cfg, tensors, tok=None):
    os.makedirs(d, exist_ok=True)
    cfg = dict(cfg)
    if "hybrid_override_pattern" in cfg:
        cfg["layers_block_type"] = [KIND_NAMES[k] for k in cfg["hybrid_override_pattern"]]
        cfg["num_hidden_layers"] = len(cfg["hybrid_override_pattern"])
    cfg["torch_dtype"] = "float32"
    nref.write_safetensors(os.path.join(d, "model.safetensors"),
                           {k: v.to(torch.float32).contiguous() for k, v in sorted(tensors.items())})
    if tok:
        for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(tok, f), d)
        json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": [2, 11]},
                  open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, allow_nan=True)


def load_target(a):
    d = os.path.join(a.work, "target-f32")
    cfg = json.load(open(os.path.join(d, "config.json")))
    t = nref.read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, t


# --------------------------------------------------------------------------------------------------------------
# stage: drafters (target frozen)
# --------------------------------------------------------------------------------------------------------------

def drafter_config(kind, tcfg):
    spark = kind == "dspark"
    H, V, L = tcfg["hidden_size"], tcfg["vocab_size"], len(tcfg["hybrid_override_pattern"])
    n_layers, rank = 2, 64
    dcfg = {"mask_token_id": MASK_ID, "target_layer_ids": DRAFT_TAPS, "causal": spark, "use_swa": spark,
            "attention_sink_bias": spark, "sample_from_anchor": False}
    if spark:
        dcfg["swa_window_size"] = 1024
    cfg = {"architectures": ["Qwen3DSparkModel" if spark else "DFlashDraftModel"], "model_type": "qwen3",
           "dtype": "bfloat16", "hidden_size": H, "num_hidden_layers": n_layers, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 2 * H, "hidden_act": "silu",
           "rms_norm_eps": 1e-6, "attention_bias": False, "vocab_size": V, "max_position_embeddings": 1048576,
           "rope_theta": 10000, "layer_types": ["sliding_attention" if spark else "full_attention"] * n_layers,
           "sliding_window": 1024 if spark else None, "attention_sink_bias": spark, "dflash_config": dcfg,
           "target_layer_ids": DRAFT_TAPS, "eagle_aux_hidden_state_layer_ids": [x + 1 for x in DRAFT_TAPS],
           "num_aux_layers": len(DRAFT_TAPS), "num_target_layers": L, "mask_token_id": MASK_ID,
           "has_embed_tokens": True, "has_lm_head": False, "train_embed_tokens": False, "draft_vocab_size": None,
           "sample_from_anchor": False}
    if spark:
        cfg.update({"block_size": DRAFT_BLOCK, "dspark_fixup_head_type": "markov", "dspark_markov_rank": rank,
                    "markov_head_type": "vanilla", "markov_rank": rank})
    else:
        cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 128.0, "original_max_position_embeddings": 8192,
                                  "rope_theta": 10000}
    return cfg


def init_drafter(cfg, target_t, seed):
    g = torch.Generator().manual_seed(seed)
    H, nH, nKV, d, F = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                         "intermediate_size"))
    V, n = cfg["vocab_size"], len(DRAFT_TAPS)
    std, rstd = 0.02, 0.02 / math.sqrt(2 * cfg["num_hidden_layers"])
    t = {"fc.weight": torch.randn(H, n * H, generator=g) * std, "hidden_norm.weight": torch.ones(H),
         "norm.weight": torch.ones(H), "embed_tokens.weight": target_t["backbone.embeddings.weight"].clone()}
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        t.update({p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H),
                  p + "self_attn.q_proj.weight": torch.randn(nH * d, H, generator=g) * std,
                  p + "self_attn.k_proj.weight": torch.randn(nKV * d, H, generator=g) * std,
                  p + "self_attn.v_proj.weight": torch.randn(nKV * d, H, generator=g) * std,
                  p + "self_attn.o_proj.weight": torch.randn(H, nH * d, generator=g) * rstd,
                  p + "self_attn.q_norm.weight": torch.ones(d), p + "self_attn.k_norm.weight": torch.ones(d),
                  p + "mlp.gate_proj.weight": torch.randn(F, H, generator=g) * std,
                  p + "mlp.up_proj.weight": torch.randn(F, H, generator=g) * std,
                  p + "mlp.down_proj.weight": torch.randn(H, F, generator=g) * rstd})
        if cfg["attention_sink_bias"]:
            t[p + "self_attn.attention_sink_bias"] = torch.zeros(nH)
    if "markov_rank" in cfg:
        r = cfg["markov_rank"]
        t["markov_head.markov_w1.weight"] = torch.randn(V, r, generator=g) * 0.02
        t["markov_head.markov_w2.weight"] = torch.zeros(V, r)
    return t


def target_pass(tg, seq, taps):
    """Frozen target over a window: (probs [T, V], argmax [T], post-norm hidden [T, H], taps {L: [T, H]})."""
    with torch.no_grad():
        d = {L: None for L in taps}
        h = tg.hidden(seq.tolist(), tg.new_state(), taps=d)
        lg = tg.logits(h)
        return torch.softmax(lg, -1), lg.argmax(-1), h, d


def mtp_distill_loss(tg, probs, greedy, h, hard, depth=3):
    """Chained MTP (the engine drafts with it 3 deep): depth d reads (h^(d-1)_i, g_{i+d}) and is trained towards the
    target's distribution of row i+d. g = the target's own greedy tokens (what is committed under greedy decoding)."""
    T = h.shape[0]
    loss, hs = 0.0, h
    for d in range(1, depth + 1):
        n = T - d
        lg, hp = tg.mtp_step(hs[:n], greedy[d - 1:d - 1 + n].tolist(), tg.new_mtp_state())
        loss = loss + distill_ce(lg, probs[d:d + n], greedy[d:d + n], hard) / depth
        hs = hp
    return loss


def drafter_loss(dr, seq, probs, greedy, taps, anchors, hard):
    """Block of [anchor x_p, MASK x 7] at positions p..p+7 over context rows 0..p-1; slot k is trained towards the
    target's distribution of the token at p+k (row p+k-1). DSpark's Markov prev: anchor, then the previous slot's
    target-greedy token."""
    cols = [taps[L] for L in dr.cfg.taps]
    ctx = dr.context_kv(dr.fuse(torch.cat(cols, dim=1)))
    Q = DRAFT_BLOCK
    loss = 0.0
    for p in anchors:
        z = dr.block_hidden([int(seq[p])] + [dr.cfg.mask_id] * (Q - 1), p, [(K[:p], V[:p]) for K, V in ctx])
        base = dr.base_logits(z)                                  # [Q-1, V] slots 1..Q-1
        if dr.cfg.kind == "dspark":
            prev = torch.cat([seq[p:p + 1], greedy[p:p + Q - 2]])   # slot k's prev = greedy token at p+k-1
            w1 = dr.W("markov_head.markov_w1.weight")[prev]
            base = base + w1 @ dr.W("markov_head.markov_w2.weight").t()
        loss = loss + distill_ce(base, probs[p:p + Q - 1], greedy[p:p + Q - 1], hard) / len(anchors)
    return loss


def stage_drafters(a, logj):
    tcfg, tt = load_target(a)
    tg = nref.NemotronH(tcfg, tt)
    tg.scan_chunk = 64
    train = load_ids(a, "train")
    T = a.seq
    kinds = a.drafters.split(",")
    if "mtp" in kinds:
        tt = distill_mtp(a, logj, tcfg, tg, train, T)
        tg = nref.NemotronH(tcfg, tt)
        tg.scan_chunk = 64
    else:
        tt = tg.t
    # 2) DFlash and DSpark
    for kind in [k for k in kinds if k in ("dflash", "dspark")]:
        train_block_drafter(a, logj, kind, tcfg, tt, tg, train, T)


def distill_mtp(a, logj, tcfg, tg, train, T):
    """MTP distillation: only mtp.* trains."""
    mp = {k: torch.nn.Parameter(v) for k, v in tg.t.items() if k.startswith("mtp.") and
          not k.endswith("e_score_correction_bias")}
    tg.t.update(mp)
    opt = make_opt(mp, a.lr / 3)
    rng = np.random.default_rng(a.seed + 1)
    hist, t0 = [], time.time()
    for step in range(a.mtp_steps):
        for gp in opt.param_groups:
            gp["lr"] = cosine_lr(step, a.mtp_steps, a.lr / 3, 10)
        opt.zero_grad(set_to_none=True)
        tot = 0.0
        for seq in batches(train, T, a.batch, rng):
            probs, greedy, h, _ = target_pass(tg, seq[:T], [])
            loss = mtp_distill_loss(tg, probs, greedy, h, a.hard)
            (loss / a.batch).backward()
            tot += loss.item() / a.batch
        torch.nn.utils.clip_grad_norm_(list(mp.values()), 1.0)
        opt.step()
        hist.append({"step": step + 1, "loss": tot, "s": time.time() - t0})
        if (step + 1) % a.eval_every == 0 or step + 1 == a.mtp_steps:
            log(f"mtp distill step {step + 1}/{a.mtp_steps}: CE {tot:.3f}, {time.time() - t0:.0f} s")
    logj["mtp"] = hist
    tt = {k: v.detach() for k, v in tg.t.items()}
    save_dense(os.path.join(a.work, "target-f32"), tcfg, tt, tok=os.path.join(a.work, "tokenizer"))
    return tt


def train_block_drafter(a, logj, kind, tcfg, tt, tg, train, T):
    cfg = drafter_config(kind, tcfg)
    t = init_drafter(cfg, tt, a.seed + (2 if kind == "dflash" else 3))
    params = {k: torch.nn.Parameter(v) for k, v in t.items()}
    dr = dref.Drafter(cfg, params, tg, dtype=torch.float32)
    for k in params:
        assert dr.t[k] is params[k], k
    emb = params["embed_tokens.weight"]
    keep = torch.zeros(emb.shape[0], 1)
    keep[MASK_ID] = 1.0
    emb.register_hook(lambda g: g * keep)      # train_embed_tokens false: only the mask row moves
    opt = make_opt(params, a.lr)
    rng = np.random.default_rng(a.seed + 4)
    hist, t0 = [], time.time()
    steps = a.drafter_steps
    for step in range(steps):
        for gp in opt.param_groups:
            gp["lr"] = cosine_lr(step, steps, a.lr, 10)
        opt.zero_grad(set_to_none=True)
        tot = 0.0
        for seq in batches(train, T, a.batch, rng):
            seq = seq[:T]
            probs, greedy, _, taps = target_pass(tg, seq, DRAFT_TAPS)
            anchors = sorted(rng.choice(np.arange(8, T - DRAFT_BLOCK), size=a.anchors, replace=False).tolist())
            loss = drafter_loss(dr, seq, probs, greedy, taps, anchors, a.hard)
            (loss / a.batch).backward()
            tot += loss.item() / a.batch
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        hist.append({"step": step + 1, "loss": tot, "s": time.time() - t0})
        if (step + 1) % a.eval_every == 0 or step + 1 == steps:
            log(f"{kind} step {step + 1}/{steps}: CE {tot:.3f}, {time.time() - t0:.0f} s")
    logj[kind] = hist
    d = os.path.join(a.work, f"{kind}-f32")
    os.makedirs(d, exist_ok=True)
    nref.write_safetensors(os.path.join(d, "model.safetensors"),
                           {k: v.detach().contiguous() for k, v in sorted(params.items())})
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)


# --------------------------------------------------------------------------------------------------------------
# stage: export and report
# --------------------------------------------------------------------------------------------------------------

def stage_export(a):
    os.makedirs(a.out, exist_ok=True)
    w = a.work
    outs = {FAMILY: ("target-f32", ["--format", "modelopt"]),
            FAMILY + "-bf16": ("target-f32", ["--format", "dense", "--dtype", "bf16"]),
            FAMILY + "-dflash": ("dflash-f32", []),
            FAMILY + "-dspark": ("dspark-f32", [])}
    for name, (src, flags) in outs.items():
        dst = os.path.join(a.out, name)
        if os.path.exists(dst):
            shutil.rmtree(dst)
        run([a.nemotron, "convert", "--from", os.path.join(w, src), "--out", dst] + flags)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemotron", required=True, help="the built nemotron binary")
    ap.add_argument("--work", required=True, help="working directory (corpus ids, f32 checkpoints, log)")
    ap.add_argument("--out", required=True, help="where the exported family goes (models/)")
    ap.add_argument("--stage", default="corpus", choices=["corpus", "tokenizer", "target", "drafters", "export",
                                                          "report"])
    ap.add_argument("--smoke", action="store_true", help="a few steps of every stage (CI)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--target-steps", type=int, default=600)
    ap.add_argument("--mtp-steps", type=int, default=120)
    ap.add_argument("--drafter-steps", type=int, default=250)
    ap.add_argument("--anchors", type=int, default=12, help="drafter blocks per training window")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--drafters", default="mtp,dflash,dspark", help="which drafters the drafters stage trains")
    ap.add_argument("--soft", dest="hard", action="store_false",
                    help="drafters towards the target's whole distribution instead of its greedy token")
    ap.add_argument("--only", action="store_true", help="run just --stage, not the stages after it")
    a = ap.parse_args(argv)
    if a.smoke:
        a.seq, a.batch, a.target_steps, a.mtp_steps, a.drafter_steps, a.anchors, a.eval_every = 64, 2, 6, 2, 2, 3, 3
    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    lp = os.path.join(a.work, "log.json")
    logj = json.load(open(lp)) if os.path.exists(lp) and a.stage != "corpus" else {}
    logj["args"] = vars(a)
    order = ["corpus", "tokenizer", "target", "drafters", "export", "report"]
    t0 = time.time()
    for st in order[order.index(a.stage):order.index(a.stage) + 1 if a.only else None]:
        ts = time.time()
        if st == "corpus":
            stage_corpus(a)
        elif st == "tokenizer":
            stage_tokenizer(a)
        elif st == "target":
            stage_target(a, logj)
        elif st == "drafters":
            stage_drafters(a, logj)
        elif st == "export":
            stage_export(a)
        elif st == "report":
            import report
            report.run(a, logj)
        logj.setdefault("stage_seconds", {})[st + ("" if st != "drafters" else ":" + a.drafters)] = time.time() - ts
        # merge into the file: two --stage drafters runs (e.g. --drafters mtp,dflash and --drafters dspark) may share it
        cur = json.load(open(lp)) if os.path.exists(lp) else {}
        for k, v in logj.items():
            if isinstance(v, dict) and isinstance(cur.get(k), dict):
                cur[k].update(v)
            else:
                cur[k] = v
        json.dump(cur, open(lp, "w"), indent=1)
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
