#!/usr/bin/python3
"""Independent PyTorch reference of NVIDIA's DFlash and DSpark block drafters (Nemotron 3.5 Lightning style).

Written from the spec /work/shared/spec/dflash_dspark.md (§1.1-§1.6 DFlash, §2 config/weights, §3 DSpark,
§7, §9), NOT from the C++ engine. The target (Nemotron-H) is tools/reference/nemotron_ref.py.

Numerics: float64 by default (every activation, weights widened from their dequantized f32 values); RoPE
angles pos*inv_freq and cos/sin always in float64. `dtype=torch.float32` runs the same math in f32 (angles still
f64, cast to f32 after cos/sin). Argmax ties -> lowest index.

What is computed (spec section in brackets):
  taps      f[j] = concat_L x_{after block L}[j] for L in target_layer_ids, pre-norm; the last block's tap is
            the input of norm_f (switch last_tap_postnorm=True reads it after norm_f instead, §9.1)      [§1.1]
  fusion    c[j] = RMSNorm(fc . f[j], hidden_norm, eps=rms_norm_eps)                                      [§1.2]
  context   per drafter layer: K[j] = RoPE(RMSNorm_perhead(Wk c[j], k_norm), pos=j), V[j] = Wv c[j]     [§1.3]
  block     rows [anchor, MASK x (Q-1)] at positions p..p+Q-1, embeddings = the drafter's embed_tokens
            (the target's if the drafter ships none); pre-norm Qwen3 layers; attention of each row over the
            context keys 0..p-1 plus the block keys, masks per config (DFlash: everything visible,
            bidirectional; DSpark: causal in the block, sliding window q-W < j, per-head sink logit in the
            softmax normaliser with no value); SwiGLU MLP; final norm                                   [§1.5, §3.2]
  logits    base_i = lm_head_target . z_i for rows i = 1..Q-1 (raw target head)                        [§1.5, §3.5]
  drafts    DFlash: argmax base_i. DSpark: final_i = base_i + W2 . W1[prev], prev = anchor for slot 1
            then the previous draft (sample_from_anchor = false layout)                                 [§1.6, §3.1, §3.3]

Module API
    target = nemotron_ref.NemotronH(*nemotron_ref.load_checkpoint(TARGET_DIR), dtype=torch.float64)
    dr = Drafter(*load_drafter(DRAFT_DIR), target, dtype=torch.float64)
    ctx = dr.context(seq)                      # K/V of every committed row of seq (one causal target run)
    drafts, base, final = dr.draft(anchor=seq[p], p=p, k=k, ctx=ctx, forced=None)
    res = spec_greedy(target, dr, prompt, n_gen, gamma)   # whole greedy speculative loop (reference's own)

CLI (same files as `nemotron dump --draft`, so the oracle's comparison can be exercised without the engine):
    /usr/bin/python3 tools/reference/drafter_ref.py --model TARGET --draft DRAFTER --ids 1,2,3 --gen N
        --out PREFIX [--draft-max G] [--dtype f64|f32] [--last-tap-postnorm] [--variant NAME ...]
writes PREFIX.json/.f32 (target greedy dump, nemotron_ref format), PREFIX.draft.json
({"kind","gamma","vocab","tap_layers","rounds":[{"p","anchor","q_rows","drafts"}]}), PREFIX.draft_base.f32 and
PREFIX.draft_final.f32 (per round the k rows [k, V], little-endian f32).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nemotron_ref as nref  # noqa: E402


# ----------------------------------------------------------------------------------------------------------
# config (spec §2.1-§2.3)
# ----------------------------------------------------------------------------------------------------------

def _get(d, *keys, default=None):
    """First key present with a non-None value."""
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return d[k]
    return default


class DrafterConfig:
    """The fields of a DFlash/DSpark config.json the reference uses.

    Resolution rules (mine where the spec lists several keys):
      kind            "dspark" if an architecture name contains "DSpark", dspark_fixup_head_type/markov_rank is
                      set, or markov_head.* tensors exist; "dflash" if an architecture contains "DFlash".
      taps            dflash_config.target_layer_ids, else target_layer_ids, else eagle_aux_hidden_state_layer_ids-1.
      mask            dflash_config.mask_token_id, else mask_token_id.
      window (layer)  use_swa (dflash_config) forces swa_window_size (else sliding_window) on every layer; without
                      use_swa a layer_types "sliding_attention" layer uses sliding_window.
      causal (layer)  dflash_config.causal, else is_causal; if neither is given, sliding layers are causal and
                      full-attention layers bidirectional (vLLM's rule, spec §2.1 layer_types).
      sinks           dflash_config.attention_sink_bias, else attention_sink_bias / add_swa_attention_sink_bias.
      rope            rope_parameters, else rope_scaling; rope_type/type "yarn" -> YaRN (§1.5), absent/"default"
                      -> plain; theta = rope_parameters.rope_theta, else rope_theta, else 10000.
      block_size      block_size, else 8 (the DFlash config has none; §9.3).
    """

    def __init__(self, d, tensor_names=()):
        self.raw = d
        dc = d.get("dflash_config") or {}
        archs = [str(a).lower() for a in (d.get("architectures") or [])]
        markov_t = any(n.split("model.", 1)[-1].startswith("markov_head.") for n in tensor_names)
        fixup = str(d.get("dspark_fixup_head_type") or "").lower()
        if (any("dspark" in a for a in archs) or fixup == "markov" or markov_t
                or _get(d, "markov_rank", "dspark_markov_rank") is not None):
            self.kind = "dspark"
        elif any("dflash" in a for a in archs) or d.get("dflash_config") is not None:
            self.kind = "dflash"
        else:
            raise ValueError(f"config is neither DFlash nor DSpark (architectures {d.get('architectures')})")
        self.H = int(d["hidden_size"])
        self.L = int(d["num_hidden_layers"])
        self.nH = int(d["num_attention_heads"])
        self.nKV = int(_get(d, "num_key_value_heads", default=self.nH))
        self.d = int(_get(d, "head_dim", default=self.H // self.nH))
        self.F = int(d["intermediate_size"])
        self.eps = float(_get(d, "rms_norm_eps", default=1e-6))
        self.V = int(d["vocab_size"])
        if self.nH % self.nKV:
            raise ValueError(f"num_attention_heads {self.nH} not a multiple of num_key_value_heads {self.nKV}")
        if d.get("draft_vocab_size") not in (None, self.V):
            raise NotImplementedError("reduced draft vocabulary (draft_vocab_size + d2t) is not supported")
        if str(_get(d, "hidden_act", default="silu")).lower() != "silu":
            raise NotImplementedError(f"hidden_act {d.get('hidden_act')}")
        if d.get("attention_bias"):
            raise NotImplementedError("attention_bias true")
        if not _get(dc, "use_aux_hidden_state", default=True):
            raise NotImplementedError("use_aux_hidden_state false")
        if not d.get("is_neox_style", True):
            raise NotImplementedError("is_neox_style false (interleaved RoPE)")
        taps = _get(dc, "target_layer_ids", default=_get(d, "target_layer_ids"))
        if taps is None and d.get("eagle_aux_hidden_state_layer_ids") is not None:
            taps = [int(x) - 1 for x in d["eagle_aux_hidden_state_layer_ids"]]
        if not taps:
            raise ValueError("no target_layer_ids in the drafter config")
        self.taps = [int(x) for x in taps]
        mask = _get(dc, "mask_token_id", default=_get(d, "mask_token_id"))
        if mask is None:
            raise ValueError("no mask_token_id in the drafter config")
        self.mask_id = int(mask)
        self.sample_from_anchor = bool(_get(dc, "sample_from_anchor", default=_get(d, "sample_from_anchor",
                                                                                  default=False)))
        self.block_size = int(_get(d, "block_size", default=_get(dc, "block_size", default=8)))
        # attention shape per layer
        lt = d.get("layer_types") or ["full_attention"] * self.L
        if len(lt) != self.L:
            raise ValueError(f"layer_types has {len(lt)} entries for {self.L} layers")
        use_swa = _get(dc, "use_swa")
        W = _get(dc, "swa_window_size", default=d.get("sliding_window"))
        causal = _get(dc, "causal", default=d.get("is_causal"))
        self.window, self.causal = [], []
        for l in range(self.L):
            sliding = bool(use_swa) if use_swa is not None else (str(lt[l]) == "sliding_attention")
            if sliding and W is None:
                raise ValueError("sliding-window attention without a window size")
            self.window.append(int(W) if sliding else None)
            self.causal.append(bool(causal) if causal is not None else sliding)
        self.sinks = bool(_get(dc, "attention_sink_bias",
                               default=_get(d, "attention_sink_bias", "add_swa_attention_sink_bias", default=False)))
        # RoPE
        rp = _get(d, "rope_parameters", "rope_scaling")
        rtype = str(_get(rp or {}, "rope_type", "type", default="default")).lower()
        self.rope_theta = float(_get(rp or {}, "rope_theta", default=_get(d, "rope_theta", default=10000.0)))
        if rtype == "yarn":
            self.rope = dict(type="yarn", theta=self.rope_theta, factor=float(rp["factor"]),
                             orig=float(rp["original_max_position_embeddings"]),
                             beta_fast=float(_get(rp, "beta_fast", default=32.0)),
                             beta_slow=float(_get(rp, "beta_slow", default=1.0)),
                             attention_factor=_get(rp, "attention_factor"),
                             truncate=bool(_get(rp, "truncate", default=True)))
            if _get(rp, "mscale", "mscale_all_dim") is not None:
                raise NotImplementedError("YaRN mscale/mscale_all_dim (DeepSeek form) not supported")
        elif rtype == "default":
            self.rope = dict(type="default", theta=self.rope_theta)
        else:
            raise NotImplementedError(f"rope type {rtype}")
        # Markov head (DSpark, §3.1)
        self.markov_rank = _get(d, "markov_rank", "dspark_markov_rank")
        self.markov_type = str(_get(d, "markov_head_type", default="vanilla")).lower()
        if self.kind == "dspark":
            if self.markov_type != "vanilla":
                raise NotImplementedError(f"markov_head_type {self.markov_type}")
        self.has_embed = bool(d.get("has_embed_tokens", True))


# ----------------------------------------------------------------------------------------------------------
# RoPE (spec §1.5): NeoX rotate-half, plain or YaRN; angles in float64
# ----------------------------------------------------------------------------------------------------------

def yarn_parameters(d, theta, factor, orig, beta_fast=32.0, beta_slow=1.0, attention_factor=None, truncate=True):
    """Returns (inv_freq [d/2] float64, mscale, low, high) exactly as spec §1.5:
        pf_i = theta^(2i/d); extrap_i = 1/pf_i; interp_i = 1/(factor*pf_i)
        low  = floor(d*ln(orig/(beta_fast*2pi)) / (2 ln theta)),  high = ceil(d*ln(orig/(beta_slow*2pi)) / (2 ln theta)),
        clamped to [0, d-1]; ramp_i = clamp((i-low)/(high-low), 0, 1)
        inv_freq_i = interp_i*ramp_i + extrap_i*(1-ramp_i);  mscale = 0.1*ln(factor)+1 multiplies cos AND sin.
    (high == low gets +0.001, the usual guard; attention_factor, if the config gives one, replaces mscale.)"""
    half = d // 2
    i = np.arange(half, dtype=np.float64)
    pf = np.float64(theta) ** (2.0 * i / d)
    extrap = 1.0 / pf
    interp = 1.0 / (factor * pf)

    def corr(nrot):
        return d * math.log(orig / (nrot * 2.0 * math.pi)) / (2.0 * math.log(theta))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    span = (high - low) if high != low else 0.001
    ramp = np.clip((i - low) / span, 0.0, 1.0)
    inv = interp * ramp + extrap * (1.0 - ramp)
    if attention_factor is not None:
        mscale = float(attention_factor)
    else:
        mscale = 0.1 * math.log(factor) + 1.0 if factor > 1.0 else 1.0
    return inv, mscale, low, high


def rope_tables(rope, d, variants=()):
    """(inv_freq float64 [d/2], mscale) for a DrafterConfig.rope dict."""
    if rope["type"] == "yarn" and "plain_rope" not in variants:
        inv, ms, _, _ = yarn_parameters(d, rope["theta"], rope["factor"], rope["orig"], rope["beta_fast"],
                                        rope["beta_slow"], rope["attention_factor"], rope["truncate"])
        if "no_mscale" in variants:
            ms = 1.0
        return inv, ms
    i = np.arange(d // 2, dtype=np.float64)
    return 1.0 / (np.float64(rope["theta"]) ** (2.0 * i / d)), 1.0


def apply_rope(x, positions, inv_freq, mscale, interleaved=False):
    """x [n, heads, d] (any float dtype); positions: n ints. NeoX: x*cos + rotate_half(x)*sin with
    rotate_half([a, b]) = [-b, a] and frequencies duplicated [f, f]; cos and sin both times mscale.
    interleaved=True is the GPT-J pairing (a deliberately wrong variant here)."""
    pos = np.asarray(positions, dtype=np.float64)
    ang = pos[:, None] * np.asarray(inv_freq, dtype=np.float64)[None, :]          # float64 [n, d/2]
    cos = torch.from_numpy(np.cos(ang) * mscale).to(x.dtype)[:, None, :]
    sin = torch.from_numpy(np.sin(ang) * mscale).to(x.dtype)[:, None, :]
    half = x.shape[-1] // 2
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


# ----------------------------------------------------------------------------------------------------------
# checkpoint
# ----------------------------------------------------------------------------------------------------------

def load_drafter(model_dir):
    """(config dict, {name: torch f32}) of a drafter checkpoint in any format the target reference reads
    (dense or ModelOpt W4A16 NVFP4 via nemotron_formats' own dequantizers). Names keep their checkpoint form;
    Drafter strips an optional `model.` prefix."""
    return nref.load_checkpoint(model_dir)


class Drafter:
    # Deliberately WRONG (or alternative) readings of the spec. Used by the oracle's self-test (a dump made with
    # one of these must be rejected) and by its failure diagnosis. Never enabled by default.
    VARIANTS = {
        "last_tap_postnorm": "last tap read after norm_f (HF output_hidden_states convention, §9.1 alternative)",
        "tap_minus_one": "tap L read as the residual ENTERING block L (+1 semantics confusion)",
        "no_hidden_norm": "fusion without hidden_norm",
        "no_mscale": "YaRN without the mscale factor on cos/sin",
        "plain_rope": "plain RoPE instead of YaRN",
        "rope_interleaved": "GPT-J interleaved RoPE pairs instead of NeoX rotate-half",
        "ctx_no_rope": "context keys not rotated",
        "no_qk_norm": "q_norm/k_norm not applied",
        "block_causal": "causal mask inside the block (DFlash is bidirectional)",
        "block_bidirectional": "bidirectional block (DSpark is causal)",
        "no_window": "sliding window ignored",
        "no_sink": "attention sink ignored",
        "sink_scaled": "sink logit multiplied by 1/sqrt(head_dim)",
        "target_embed": "target embeddings instead of the drafter's embed_tokens",
        "block_pos_shift": "block positions p+1..p+Q instead of p..p+Q-1",
        "gqa_mod": "q head h uses kv head h % nKV instead of h // (nH/nKV)",
        "logits_from_row0": "base logits from rows 0..Q-2 (sample_from_anchor=true layout)",
        "no_markov": "DSpark final logits without the Markov bias",
        "markov_skip_first": "no Markov bias on slot 1 (prev chain starts at the first draft)",
    }

    _ONLY = {"dspark": {"block_bidirectional", "no_window", "no_sink", "sink_scaled", "no_markov",
                        "markov_skip_first"},
             "dflash": {"no_mscale", "plain_rope", "block_causal"}}

    @classmethod
    def variants_for(cls, kind):
        """The variants that can change the output of a `kind` drafter (sorted)."""
        other = cls._ONLY["dflash" if kind == "dspark" else "dspark"]
        return sorted(v for v in cls.VARIANTS if v not in other)

    def __init__(self, cfg_dict, tensors, target, dtype=torch.float64, variants=(), last_tap_postnorm=False):
        self.cfg = c = DrafterConfig(cfg_dict, tensors.keys())
        self.dtype = dtype
        self.target = target
        self.v = frozenset(variants)
        unknown = self.v - set(self.VARIANTS)
        if unknown:
            raise ValueError(f"unknown drafter variants {sorted(unknown)}")
        self.last_tap_postnorm = bool(last_tap_postnorm) or "last_tap_postnorm" in self.v
        if c.sample_from_anchor:
            raise NotImplementedError("sample_from_anchor = true layout (only the Lightning 'bonus anchor' "
                                      "layout, sample_from_anchor = false, is implemented; spec §3.3)")
        t = {}
        for k, val in tensors.items():
            if k.startswith("model."):
                k = k[len("model."):]
            if k in t:
                raise ValueError(f"tensor {k} appears with and without the model. prefix")
            t[k] = val.to(dtype) if val.is_floating_point() else val
        self.t = t
        tc = target.cfg
        if c.V != tc.V:
            raise ValueError(f"drafter vocab {c.V} != target vocab {tc.V}")
        for L in c.taps:
            if not 0 <= L < tc.L:
                raise ValueError(f"tap layer {L} outside the target's blocks 0..{tc.L - 1}")
        if "embed_tokens.weight" in t and "target_embed" not in self.v:
            self.embed = t["embed_tokens.weight"]
        else:
            self.embed = target.W("backbone.embeddings.weight").to(dtype)
        self.lm_head = target.W("lm_head.weight").to(dtype)      # raw target head (§3.5), never the drafter's
        self.inv_freq, self.mscale = rope_tables(c.rope, c.d, self.v)
        self._check_shapes(tc)

    def W(self, name):
        try:
            return self.t[name]
        except KeyError:
            raise KeyError(f"drafter tensor {name} missing") from None

    def _check_shapes(self, tc):
        c = self.cfg
        if c.H != tc.H:
            raise ValueError(f"drafter hidden_size {c.H} != target hidden_size {tc.H} (the target lm_head reads "
                             f"the drafter's final hidden)")
        exp = {"fc.weight": (c.H, len(c.taps) * tc.H), "hidden_norm.weight": (c.H,), "norm.weight": (c.H,)}
        if "embed_tokens.weight" in self.t:
            exp["embed_tokens.weight"] = (c.V, c.H)
        elif tc.H != c.H:
            raise ValueError("drafter has no embed_tokens and the target hidden size differs")
        for l in range(c.L):
            p = f"layers.{l}."
            exp.update({p + "input_layernorm.weight": (c.H,), p + "post_attention_layernorm.weight": (c.H,),
                        p + "self_attn.q_proj.weight": (c.nH * c.d, c.H),
                        p + "self_attn.k_proj.weight": (c.nKV * c.d, c.H),
                        p + "self_attn.v_proj.weight": (c.nKV * c.d, c.H),
                        p + "self_attn.o_proj.weight": (c.H, c.nH * c.d),
                        p + "self_attn.q_norm.weight": (c.d,), p + "self_attn.k_norm.weight": (c.d,),
                        p + "mlp.gate_proj.weight": (c.F, c.H), p + "mlp.up_proj.weight": (c.F, c.H),
                        p + "mlp.down_proj.weight": (c.H, c.F)})
            if c.sinks:
                exp[p + "self_attn.attention_sink_bias"] = (c.nH,)
        if c.kind == "dspark":
            r = int(c.markov_rank) if c.markov_rank is not None else self.W("markov_head.markov_w1.weight").shape[1]
            exp["markov_head.markov_w1.weight"] = (c.V, r)
            exp["markov_head.markov_w2.weight"] = (c.V, r)
        stray = [n for n in self.t if n.endswith("attention_sink_bias")]
        if stray and not c.sinks:
            raise ValueError(f"{len(stray)} attention_sink_bias tensors but the config enables no sinks")
        for k, s in exp.items():
            got = tuple(self.W(k).shape)
            if got != s:
                raise ValueError(f"drafter {k}: shape {list(got)}, expected {list(s)}")

    # -- target taps and context (§1.1-§1.3) -------------------------------------------------------------------

    def taps(self, ids):
        """f [T, n_taps*H_target] for the token rows `ids` (a fresh causal target run)."""
        tg = self.target
        want = [L - 1 for L in self.cfg.taps] if "tap_minus_one" in self.v else list(self.cfg.taps)
        d = {L: None for L in want if L >= 0}
        st = tg.new_state()
        with torch.no_grad():
            tg.hidden(ids, st, taps=d)
        cols = []
        for L in want:
            if L < 0:
                x = tg.W("backbone.embeddings.weight")[torch.as_tensor(list(ids), dtype=torch.long)]
            else:
                x = d[L]
                if self.last_tap_postnorm and L == tg.cfg.L - 1:
                    x = tg.norm(x, "backbone.norm_f.weight")
            cols.append(x.to(self.dtype))
        return torch.cat(cols, dim=1)

    def fuse(self, f):
        """c = RMSNorm(fc . f, hidden_norm, eps)."""
        x = f.to(self.dtype) @ self.W("fc.weight").t()
        if "no_hidden_norm" in self.v:
            return x
        return nref.rmsnorm(x, self.W("hidden_norm.weight"), self.cfg.eps)

    def _heads(self, x, n):
        return x.reshape(x.shape[0], n, self.cfg.d)

    def _qk(self, h, l, which, positions):
        c = self.cfg
        p = f"layers.{l}.self_attn."
        n = c.nH if which == "q" else c.nKV
        y = self._heads(h @ self.W(p + f"{which}_proj.weight").t(), n)
        if "no_qk_norm" not in self.v:
            y = nref.rmsnorm(y, self.W(p + f"{which}_norm.weight"), c.eps)      # per head over head_dim
        return apply_rope(y, positions, self.inv_freq, self.mscale, "rope_interleaved" in self.v)

    def context_kv(self, cfeat, pos0=0):
        """Per drafter layer (K [n, nKV, d], V [n, nKV, d]) for fused rows at positions pos0..pos0+n-1."""
        c = self.cfg
        n = cfeat.shape[0]
        pos = list(range(pos0, pos0 + n))
        out = []
        for l in range(c.L):
            p = f"layers.{l}.self_attn."
            k = self._heads(cfeat @ self.W(p + "k_proj.weight").t(), c.nKV)
            if "no_qk_norm" not in self.v:
                k = nref.rmsnorm(k, self.W(p + "k_norm.weight"), c.eps)
            if "ctx_no_rope" not in self.v:
                k = apply_rope(k, pos, self.inv_freq, self.mscale, "rope_interleaved" in self.v)
            v = self._heads(cfeat @ self.W(p + "v_proj.weight").t(), c.nKV)
            out.append((k, v))
        return out

    def context(self, seq_rows):
        """Context K/V of every row of `seq_rows` (positions 0..n-1) from one causal target run. Slicing the
        first p rows gives the drafter context for an anchor at position p."""
        with torch.no_grad():
            return self.context_kv(self.fuse(self.taps(seq_rows)))

    # -- block forward (§1.5, §3.2) ----------------------------------------------------------------------------

    def visible(self, l, p, Q, n_ctx):
        """Bool [Q, n_ctx+Q]: may block row i (position p+i) see key k (context position k < n_ctx, or block
        row k-n_ctx at position p+k-n_ctx)?"""
        c = self.cfg
        causal = c.causal[l]
        if "block_causal" in self.v:
            causal = True
        if "block_bidirectional" in self.v:
            causal = False
        W = None if "no_window" in self.v else c.window[l]
        qi = torch.arange(Q)[:, None]
        kk = torch.arange(n_ctx + Q)[None, :]
        is_blk = kk >= n_ctx
        m = kk - n_ctx
        vis = torch.ones(Q, n_ctx + Q, dtype=torch.bool)
        if causal:
            vis &= ~is_blk | (m <= qi)
        if W is not None:
            qpos = p + qi
            kpos = torch.where(is_blk, p + m, kk)
            vis &= kpos > qpos - W
        return vis

    def attention(self, l, h, positions, p, ctx_l):
        c = self.cfg
        pre = f"layers.{l}.self_attn."
        Q = h.shape[0]
        q = self._qk(h, l, "q", positions)
        k = self._qk(h, l, "k", positions)
        v = self._heads(h @ self.W(pre + "v_proj.weight").t(), c.nKV)
        K = torch.cat([ctx_l[0], k], 0)
        Vv = torch.cat([ctx_l[1], v], 0)
        n_ctx = ctx_l[0].shape[0]
        rep = c.nH // c.nKV
        if "gqa_mod" in self.v:
            K, Vv = K.repeat(1, rep, 1), Vv.repeat(1, rep, 1)
        else:
            K, Vv = K.repeat_interleave(rep, dim=1), Vv.repeat_interleave(rep, dim=1)
        scale = 1.0 / math.sqrt(c.d)
        s = torch.einsum("qhd,khd->hqk", q, K) * scale                        # [nH, Q, n_ctx+Q]
        s = s.masked_fill(~self.visible(l, p, Q, n_ctx)[None], float("-inf"))
        if c.sinks and "no_sink" not in self.v:
            sig = self.W(pre + "attention_sink_bias").reshape(c.nH, 1, 1).expand(c.nH, Q, 1)
            if "sink_scaled" in self.v:
                sig = sig * scale
            a = torch.softmax(torch.cat([s, sig], dim=-1), dim=-1)[..., :-1]   # sink: normaliser only, no value
        else:
            a = torch.softmax(s, dim=-1)
        o = torch.einsum("hqk,khd->qhd", a, Vv).reshape(Q, c.nH * c.d)
        return o @ self.W(pre + "o_proj.weight").t()

    def block_hidden(self, tokens, p, ctx):
        """tokens: the Q block tokens ([anchor, MASK, ...]) at positions p..p+Q-1; ctx: per-layer (K, V) holding
        exactly the context rows the block may attend to (positions 0..p-1). Returns z = norm(x) [Q, H]."""
        c = self.cfg
        Q = len(tokens)
        x = self.embed[torch.as_tensor(list(tokens), dtype=torch.long)]
        base = p + 1 if "block_pos_shift" in self.v else p
        positions = list(range(base, base + Q))
        for l in range(c.L):
            pre = f"layers.{l}."
            h = nref.rmsnorm(x, self.W(pre + "input_layernorm.weight"), c.eps)
            x = x + self.attention(l, h, positions, p, ctx[l])
            h2 = nref.rmsnorm(x, self.W(pre + "post_attention_layernorm.weight"), c.eps)
            g = h2 @ self.W(pre + "mlp.gate_proj.weight").t()
            u = h2 @ self.W(pre + "mlp.up_proj.weight").t()
            x = x + (nref.silu(g) * u) @ self.W(pre + "mlp.down_proj.weight").t()
        return nref.rmsnorm(x, self.W("norm.weight"), c.eps)

    def base_logits(self, z):
        """Raw target lm_head on block rows 1..Q-1 -> [Q-1, V]."""
        rows = z[:-1] if "logits_from_row0" in self.v else z[1:]
        return rows @ self.lm_head.t()

    def markov_bias(self, prev):
        """W2 . W1[prev] -> [V] (vanilla Markov head, §3.1)."""
        w1 = self.W("markov_head.markov_w1.weight")[int(prev)]
        return self.W("markov_head.markov_w2.weight") @ w1

    def final_logits(self, base, anchor, drafts):
        """Logits each draft is taken from: DFlash = base; DSpark: base_i + bias(prev_i), prev_1 = anchor,
        prev_i = drafts[i-2] (the previous slot's draft)."""
        if self.cfg.kind != "dspark" or "no_markov" in self.v:
            return base.clone()
        prevs = [anchor] + list(drafts[:-1])
        out = base.clone()
        for i, pv in enumerate(prevs[:base.shape[0]]):
            if i == 0 and "markov_skip_first" in self.v:
                continue
            out[i] = base[i] + self.markov_bias(pv)
        return out

    def draft(self, anchor, p, k, ctx, forced=None):
        """One drafting round: anchor at position p, k drafts (block of Q = 1+k rows). ctx: the output of
        context() for a sequence of at least p rows (sliced here to rows 0..p-1). forced: the drafts to condition
        the DSpark Markov chain on (teacher forcing with another engine's drafts); None = own argmax.
        Returns (own drafts [k], base [k, V], final [k, V]) as torch tensors in self.dtype."""
        if k < 1:
            raise ValueError("k must be >= 1")
        ctx_p = [(K[:p], V[:p]) for K, V in ctx]
        if ctx_p[0][0].shape[0] != p:
            raise ValueError(f"context has {ctx_p[0][0].shape[0]} rows, anchor position {p}")
        tokens = [int(anchor)] + [self.cfg.mask_id] * k
        with torch.no_grad():
            z = self.block_hidden(tokens, p, ctx_p)
            base = self.base_logits(z)
            if self.cfg.kind == "dspark" and "no_markov" not in self.v:
                final = base.clone()
                drafts, prev = [], int(anchor)
                for i in range(k):
                    skip = i == 0 and "markov_skip_first" in self.v
                    if not skip:
                        final[i] = base[i] + self.markov_bias(prev)
                    d = nref.argmax_lowest(final[i].to(torch.float64).numpy())
                    drafts.append(d)
                    prev = int(forced[i]) if forced is not None else d
            else:
                final = base.clone()
                drafts = [nref.argmax_lowest(final[i].to(torch.float64).numpy()) for i in range(k)]
        return drafts, base, final


# ----------------------------------------------------------------------------------------------------------
# the reference's own greedy speculative loop (spec §1.7-§1.9) and the dump format
# ----------------------------------------------------------------------------------------------------------

def spec_greedy(target, drafter, prompt, n_gen, gamma, clamp=True):
    """Greedy speculative decoding with the reference itself. The committed tokens are the target reference's
    plain greedy tokens (the verify rule makes them identical); per round the anchor is seq[p], k = min(gamma,
    tokens still to generate) drafts are proposed, a = longest prefix of drafts equal to seq[p+1..], p += a+1.
    Returns dict(prompt, tokens, prefill [T,V], decode [N-1,V], rounds [...], base [list of [k,V]], final)."""
    pre, toks, dec = nref.greedy(target, list(prompt), n_gen)
    seq = list(prompt) + list(toks)
    ctx = drafter.context(seq)
    rounds, bases, finals = [], [], []
    p = len(prompt)
    while p < len(seq) - 1:
        k = min(gamma, len(seq) - 1 - p) if clamp else gamma
        drafts, base, final = drafter.draft(seq[p], p, k, ctx)
        a = 0
        while a < k and p + 1 + a < len(seq) and drafts[a] == seq[p + 1 + a]:
            a += 1
        rounds.append({"p": p, "anchor": seq[p], "q_rows": k + 1, "drafts": [int(x) for x in drafts]})
        bases.append(base.to(torch.float32).numpy())
        finals.append(final.to(torch.float32).numpy())
        p += a + 1
    return dict(prompt=list(prompt), tokens=list(toks), prefill=pre, decode=dec, rounds=rounds, base=bases,
                final=finals)


def write_draft_dump(prefix, kind, gamma, vocab, tap_layers, rounds, bases, finals):
    meta = {"kind": kind, "gamma": int(gamma), "vocab": int(vocab), "tap_layers": [int(x) for x in tap_layers],
            "rounds": rounds}
    with open(prefix + ".draft.json", "w") as f:
        json.dump(meta, f)
    for suffix, rows in ((".draft_base.f32", bases), (".draft_final.f32", finals)):
        with open(prefix + suffix, "wb") as f:
            for r in rows:
                f.write(np.ascontiguousarray(r, dtype="<f4").tobytes())


def read_draft_dump(prefix):
    """-> (meta, [base [k,V] per round], [final [k,V] per round]); raises ValueError on a malformed dump."""
    with open(prefix + ".draft.json") as f:
        meta = json.load(f)
    for key in ("kind", "gamma", "vocab", "tap_layers", "rounds"):
        if key not in meta:
            raise ValueError(f"{prefix}.draft.json: no '{key}'")
    V = int(meta["vocab"])
    ks = []
    for j, r in enumerate(meta["rounds"]):
        for key in ("p", "anchor", "q_rows", "drafts"):
            if key not in r:
                raise ValueError(f"{prefix}.draft.json: round {j} has no '{key}'")
        ks.append(len(r["drafts"]))
    out = []
    for suffix in (".draft_base.f32", ".draft_final.f32"):
        data = np.fromfile(prefix + suffix, dtype="<f4")
        if data.size != sum(ks) * V:
            raise ValueError(f"{prefix}{suffix}: {data.size} floats, expected {sum(ks)} rows x {V} = {sum(ks) * V}")
        data = data.reshape(sum(ks), V)
        rows, o = [], 0
        for k in ks:
            rows.append(data[o:o + k])
            o += k
        out.append(rows)
    return meta, out[0], out[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description="DFlash/DSpark drafter reference: greedy speculative dump")
    ap.add_argument("--model", required=True, help="target checkpoint")
    ap.add_argument("--draft", required=True, help="drafter checkpoint")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--out", required=True)
    ap.add_argument("--draft-max", type=int, default=None, help="gamma (default block_size-1)")
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f64")
    ap.add_argument("--last-tap-postnorm", action="store_true", help="read the last-block tap after norm_f")
    ap.add_argument("--variant", action="append", default=[], help="deliberately wrong variant (testing only)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, a.threads))
    dt = torch.float64 if a.dtype == "f64" else torch.float32
    tcfg, tt = nref.load_checkpoint(a.model)
    target = nref.NemotronH(tcfg, tt, dtype=dt)
    dcfg, dtens = load_drafter(a.draft)
    dr = Drafter(dcfg, dtens, target, dtype=dt, variants=a.variant, last_tap_postnorm=a.last_tap_postnorm)
    gamma = a.draft_max if a.draft_max is not None else dr.cfg.block_size - 1
    if a.gen < 1 or gamma < 1:
        ap.error("--gen and --draft-max must be >= 1")
    prompt = nref._parse_ids(a.ids)
    res = spec_greedy(target, dr, prompt, a.gen, gamma)
    nref.write_dump(a.out, prompt, res["tokens"], target.cfg.V, res["prefill"], res["decode"])
    write_draft_dump(a.out, dr.cfg.kind, gamma, target.cfg.V, dr.cfg.taps, res["rounds"], res["base"], res["final"])
    acc = sum(len(r["drafts"]) for r in res["rounds"])
    print(f"{len(res['rounds'])} rounds, {acc} drafts proposed, {len(res['tokens'])} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
