#!/usr/bin/python3
"""Independent PyTorch reference ("oracle") of the Nemotron-H forward pass.

Written from docs spec /work/shared/spec/nemotron_h.md (sections 1-5, 7, 8; MTP from 6), NOT from the C++
engine. Project numerics convention: every activation in f32 (or f64 if requested), weights widened,
no intermediate bf16 rounding anywhere (residual, RMSNorm output, matmul outputs, y before the gated norm).

Module API
    cfg, tensors = load_checkpoint(dir)            # config dict + {name: torch.Tensor(f32)}
    model = NemotronH(cfg, tensors, dtype=torch.float32)
    state = model.new_state()
    logits = model.forward(ids, state)             # [T, V]; continues from the cached state
    prompt_rows, tokens, decode_rows = greedy(model, prompt, n_gen)

CLI
    /usr/bin/python3 tools/reference/nemotron_ref.py --model DIR --ids 1,2,3 --gen N --out PREFIX
writes PREFIX.json ({"prompt","tokens","vocab","prefill_rows","decode_rows"}) and PREFIX.f32 (little-endian
float32 logits: T prefill rows, then N-1 decode rows, row-major [rows, V]).  Optional: --force-tokens a,b,c
(teacher forcing: feed these tokens instead of the reference's own argmax, for comparing against another
engine after a divergence), --dtype f64, --mtp-dump (writes PREFIX.mtp.f32, see mtp_dump()).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nemotron_formats as _formats  # noqa: E402

# ----------------------------------------------------------------------------------------------------------
# safetensors / config reading (no safetensors package available)
# ----------------------------------------------------------------------------------------------------------

_NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def read_safetensors(path, names=None):
    """Return {name: torch.Tensor} with float tensors widened to float32 (ints kept as int64)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if names is not None and name not in names:
            continue
        dt = info["dtype"]
        shape = [int(s) for s in info["shape"]]
        b, e = info["data_offsets"]
        raw = mm[base + b: base + e]
        if dt == "BF16":
            u16 = np.frombuffer(raw.tobytes(), dtype="<u2")
            arr = (u16.astype(np.uint32) << 16).view(np.float32)
        elif dt in _NP_DTYPES:
            npdt = np.dtype(_NP_DTYPES[dt]).newbyteorder("<")
            arr = np.frombuffer(raw.tobytes(), dtype=npdt)
            if arr.dtype.kind == "f":
                arr = arr.astype(np.float32)
            elif arr.dtype.kind in "iub":
                arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = torch.from_numpy(np.ascontiguousarray(arr).reshape(shape))
    return out


def write_safetensors_raw(path, tensors, metadata=None):
    """Minimal writer from raw bytes: tensors = {name: (dtype string, shape, bytes)}, written in the given order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    blobs = []
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hb = json.dumps(header).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def write_safetensors(path, tensors):
    """Minimal writer (f32 only) - used by tests to build checkpoints without the engine."""
    raw = {}
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
        raw[name] = ("F32", a.shape, a.tobytes())
    write_safetensors_raw(path, raw)


def load_checkpoint(model_dir, return_info=False):
    """Read config.json and all safetensors (single file or sharded via model.safetensors.index.json) in any
    supported storage format - dense F32/BF16/F16, ModelOpt NVFP4/FP8 (hf_quant_config.json / config.json
    quantization_config), MLX affine 4/8-bit (config.json "quantization", stacked switch_mlp experts, conv1d
    [C,K,1]) - dequantized by the oracle's own decoders (nemotron_formats.py, spec formats.md) to float32 tensors
    under the HF logical names. return_info=True also returns the per-weight storage info (FP8 raw values and
    scales for the W8A8 parity mode)."""
    cfg, arrs, info = _formats.load_logical(model_dir)
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrs.items()}
    if return_info:
        return cfg, tensors, info
    return cfg, tensors


def bf16_act_names_from_info(info, fp8_static=False):
    """The weight names whose inputs the bf16-activation mode rounds (engine `--arith bf16`, formats.md §2.1):
    those stored as NVFP4, FP8 or bf16, except FP8 modules with an input_scale when the W8A8 parity mode runs
    them (their E4M3 activations are exact in f32) and MoE routers (`*.mixer.gate.weight`, always f32 as in
    vLLM and HF). Non-matmul bf16 tensors (norms, embeddings) may be in the set; only linear layers read it."""
    return {name for name, ent in info.items()
            if ent.get("format") == "nvfp4"
            or (ent.get("format") == "fp8" and not (fp8_static and "input_scale" in ent))
            or (ent.get("format") == "bf16" and not name.endswith(".mixer.gate.weight"))}


def round_bf16_activation(x):
    """The bf16-activation mode's input rounding: to bf16, round to nearest even (torch's conversion), then
    |x| < 2^-100 -> +0 (the engine's flush: no product or partial sum is ever subnormal)."""
    r = x.to(torch.bfloat16).to(x.dtype)
    return torch.where(x.abs() < 2.0 ** -100, torch.zeros_like(r), r)


def fp8_static_from_info(info):
    """{weight name: (E4M3 values [o,i] torch f32, weight_scale, input_scale)} for every FP8 module with an
    input_scale - the inputs of the W8A8 static-activation parity mode (formats.md §3.3)."""
    out = {}
    for name, ent in info.items():
        if ent.get("format") == "fp8" and "input_scale" in ent:
            out[name] = (torch.from_numpy(np.ascontiguousarray(ent["wq"])), float(ent["weight_scale"]),
                         float(ent["input_scale"]))
    return out


# ----------------------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------------------

_KIND = {
    "mamba": "M", "linear_attention": "M", "m": "M",
    "attention": "*", "full_attention": "*", "*": "*",
    "moe": "E", "e": "E",
    "mlp": "-", "-": "-",
}


def _kinds_from(lst_or_pattern):
    if isinstance(lst_or_pattern, str):
        s = lst_or_pattern.replace("|", "")
        out = []
        for ch in s:
            if ch not in "M*E-":
                raise ValueError(f"bad pattern char {ch!r}")
            out.append(ch)
        return out
    out = []
    for k in lst_or_pattern:
        kk = _KIND.get(str(k).lower())
        if kk is None:
            raise ValueError(f"unknown layer kind {k!r}")
        out.append(kk)
    return out


class Config:
    def __init__(self, d):
        g = d.get
        self.raw = d

        def first(*keys, default=None):
            for k in keys:
                if k in d and d[k] is not None:
                    return d[k]
            return default

        if first("layers_block_type", "layer_types") is not None:
            self.kinds = _kinds_from(first("layers_block_type", "layer_types"))
        elif g("hybrid_override_pattern") is not None:
            self.kinds = _kinds_from(g("hybrid_override_pattern"))
        else:
            raise ValueError("config has neither layers_block_type nor hybrid_override_pattern")
        self.L = len(self.kinds)
        self.H = int(g("hidden_size"))
        self.V = int(g("vocab_size"))
        self.eps = float(first("layer_norm_epsilon", "rms_norm_eps", "norm_eps", default=1e-5))
        self.tie = bool(g("tie_word_embeddings", False))
        # mamba
        self.NH = int(first("mamba_num_heads", default=0) or 0)
        self.P = int(first("mamba_head_dim", default=0) or 0)
        self.G = int(first("n_groups", "mamba_n_groups", default=1))
        self.N = int(first("ssm_state_size", default=0) or 0)
        self.K = int(first("conv_kernel", "mamba_d_conv", default=4))
        self.conv_bias = bool(first("use_conv_bias", "mamba_conv_bias", default=True))
        lim = first("time_step_limit", "mamba_dt_limit", default=[0.0, float("inf")])
        self.dt_lo, self.dt_hi = float(lim[0]), float(lim[1])
        self.DI = self.NH * self.P
        self.CD = self.DI + 2 * self.G * self.N
        # attention
        self.HQ = int(first("num_attention_heads", default=0) or 0)
        self.HKV = int(first("num_key_value_heads", default=self.HQ) or self.HQ)
        hd = first("head_dim", "attention_head_dim")
        self.HD = int(hd) if hd is not None else (self.H // self.HQ if self.HQ else 0)
        # moe
        self.E = int(first("n_routed_experts", default=0) or 0)
        self.topk = int(first("num_experts_per_tok", default=0) or 0)
        self.F = int(first("moe_intermediate_size", default=0) or 0)
        self.n_shared = int(first("n_shared_experts", default=1) or 0)
        self.FS = int(first("moe_shared_expert_intermediate_size", default=0) or 0)
        self.norm_topk = bool(first("norm_topk_prob", default=True))
        self.rscale = float(first("routed_scaling_factor", default=1.0))
        self.n_group = int(first("n_group", default=1) or 1)
        self.topk_group = int(first("topk_group", default=1) or 1)
        self.latent = first("moe_latent_size")
        # dense mlp (may be a per-mlp-layer list)
        self.inter = first("intermediate_size", default=0)
        # mtp
        self.n_mtp = int(first("num_nextn_predict_layers", default=0) or 0)
        mk = first("mtp_layers_block_type", "mtp_hybrid_override_pattern")
        self.mtp_kinds = _kinds_from(mk) if mk is not None else ["*", "E"]


# ----------------------------------------------------------------------------------------------------------
# math helpers (nemotron_h.md §2, §3.4, §3.7)
# ----------------------------------------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    """x * rsqrt(mean(x^2) + eps) * w, all in x.dtype (no bf16 rounding; project convention)."""
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


def softplus20(v):
    """softplus with threshold 20: v if v > 20 else log1p(exp(v))."""
    return torch.where(v > 20.0, v, torch.log1p(torch.exp(torch.clamp(v, max=20.0))))


def gated_group_rmsnorm(y, z, w, groups, eps):
    """u = y*silu(z); RMS-normalise each of `groups` contiguous channel groups; multiply by w. y,z: [T, DI]."""
    u = y * silu(z)
    T, DI = u.shape
    ug = u.reshape(T, groups, DI // groups)
    ug = ug * torch.rsqrt((ug * ug).mean(dim=-1, keepdim=True) + eps)
    return ug.reshape(T, DI) * w


def ssm_scan_sequential(x, dt, A, B, C, D, S0, heads_per_group):
    """Sequential SSM recurrence (nemotron_h.md §3.5).

    x: [T, NH, P]; dt: [T, NH] (post softplus/clamp); A: [NH] (negative); B, C: [T, G, N]; D: [NH];
    S0: [NH, P, N] initial state. Returns y [T, NH, P], S_final [NH, P, N].
    S = S*exp(dt*A) + (B*dt)*x ; y = S·C + D*x
    """
    T = x.shape[0]
    S = S0.clone()
    ys = []
    for t in range(T):
        Bh = B[t].repeat_interleave(heads_per_group, dim=0)      # [NH, N]  (head h -> group h // hpg)
        Ch = C[t].repeat_interleave(heads_per_group, dim=0)      # [NH, N]
        dA = torch.exp(dt[t] * A)                                # [NH]
        dB = Bh * dt[t][:, None]                                 # [NH, N]
        S = S * dA[:, None, None] + dB[:, None, :] * x[t][:, :, None]
        y = (S * Ch[:, None, :]).sum(dim=-1) + D[:, None] * x[t]
        ys.append(y)
    return torch.stack(ys, 0), S


def ssm_scan_chunked(x, dt, A, B, C, D, S0, hpg, Q):
    """The same recurrence in the chunked SSD form (nemotron_h.md §3.6): vectorised and differentiable, so
    tools/train trains through it; equal to ssm_scan_sequential up to rounding (test_reference_selfcheck). x [T,NH,P], dt [T,NH], A [NH], B/C [T,G,N], D [NH], S0 [NH,P,N]. Returns y, S_final.

    Per chunk, per head: a_t = dt_t*A, u_t = dt_t*x_t, seg(i,j) = Σ_{j<k<=i} a_k (computed directly,
    not as a difference of cumulative sums);
      Y_diag[i] = Σ_{j<=i} (C_i·B_j) exp(seg(i,j)) u_j
      Y_off[i]  = exp(Σ_{k<=i} a_k) (C_i · H_in)
      H_out     = exp(Σ_all a) H_in + Σ_j exp(seg(last,j)) u_j ⊗ B_j
    """
    T, NH, P = x.shape
    Bh = B.repeat_interleave(hpg, dim=1)       # [T, NH, N]
    Ch = C.repeat_interleave(hpg, dim=1)
    Hs = S0.clone()
    ys = []
    for c0 in range(0, T, Q):
        c1 = min(T, c0 + Q)
        L = c1 - c0
        a = (dt[c0:c1] * A[None, :]).t()                    # [NH, L]
        u = dt[c0:c1, :, None] * x[c0:c1]                   # [L, NH, P]
        # seg[h,i,j] = sum_{k=j+1..i} a[h,k] for j<=i, -inf above the diagonal
        am = a[:, None, :].expand(NH, L, L).clone()         # am[h, i, k] = a[h, k]
        kk = torch.arange(L)
        ii = kk[:, None]
        # for row i keep entries k <= i, then cumulative sum from the right gives sum_{k=j..i}; shift by one
        am = am.masked_fill((kk[None, :] > ii)[None], 0.0)
        rev = torch.flip(torch.cumsum(torch.flip(am, dims=[2]), dim=2), dims=[2])   # sum_{k=j..L-1, k<=i}
        seg = rev - am                                      # sum_{k=j+1..i}
        seg = seg.masked_fill((kk[None, :] > ii)[None], float("-inf"))
        decay = torch.exp(seg)                              # [NH, L(i), L(j)]
        cb = torch.einsum("ihn,jhn->hij", Ch[c0:c1], Bh[c0:c1])   # C_i·B_j
        y_diag = torch.einsum("hij,jhp->ihp", cb * decay, u)
        cs_in = torch.exp(torch.cumsum(a, dim=1))           # exp(sum_{k<=i} a_k)  [NH, L]
        y_off = torch.einsum("ihn,hpn->ihp", Ch[c0:c1], Hs) * cs_in.t()[:, :, None]
        ys.append(y_diag + y_off + D[None, :, None] * x[c0:c1])
        last = seg[:, L - 1, :]                             # [NH, L(j)] = sum_{k=j+1..L-1}
        Hs = torch.exp(a.sum(dim=1))[:, None, None] * Hs + \
            torch.einsum("hj,jhp,jhn->hpn", torch.exp(last), u, Bh[c0:c1])
    return torch.cat(ys, 0), Hs


# UNCERTAIN (nemotron_h.md §5.2, grouped routing): the biased score of the experts in groups that were not kept.
# vLLM / SGLang / llama.cpp exclude them (-inf); Hugging Face's NemotronHTopkRouter (= DeepseekV3TopkRouter)
# masked_fill(..., 0.0), so there a dropped group's expert still beats a kept expert whose biased score is < 0.
# Both agree while the kept experts' biased scores are >= 0. The engine has the same switch (moe.cpp
# kDroppedGroupScore).
GROUP_MASK_FILL = float("-inf")


def topk_lowest_index(scores, k):
    """Indices of the k largest entries per row; ties broken towards the lowest index. scores: [T, E]."""
    _, idx = torch.sort(scores, dim=-1, descending=True, stable=True)
    return idx[:, :k]


def argmax_lowest(row):
    """argmax with ties -> lowest index (numpy's argmax returns the first occurrence)."""
    return int(np.argmax(np.asarray(row)))


# ----------------------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------------------

class LayerState:
    __slots__ = ("conv", "ssm", "k", "v")

    def __init__(self):
        self.conv = None
        self.ssm = None
        self.k = None
        self.v = None


class State:
    """Decode cache: per layer (Mamba conv window of K-1 raw xBC rows + SSM state; attention K/V)."""

    def __init__(self, n_layers):
        self.layers = [LayerState() for _ in range(n_layers)]
        self.pos = 0


class NemotronH:
    # Deliberately WRONG variants of known pitfalls (nemotron_h.md §8.2), used only by run_oracle.py's failure
    # diagnosis to say which mistake an engine output resembles. Never enabled by default.
    VARIANTS = {
        "ungrouped_norm": "gated norm over all DI channels instead of n_groups groups",
        "norm_before_gate": "gated norm: normalise y first, then multiply by silu(z)",
        "conv_flip": "conv taps reversed (tap 0 multiplies the newest input)",
        "conv_no_bias": "conv1d bias ignored",
        "dt_clamp_min": "dt clamped below at time_step_min (default 0.001)",
        "no_dt_bias": "dt_bias not added before softplus",
        "head_group_mod": "head h uses group h % G instead of h // (NH/G)",
        "no_D": "D skip term missing",
        "gqa_mod": "attention q head i uses kv head i % HKV instead of i // (HQ/HKV)",
        "attn_scale_hidden": "attention scale (hidden/HQ)^-0.5 instead of head_dim^-0.5",
        "router_biased_weights": "expert weights taken from the biased scores",
        "router_softmax": "softmax router instead of sigmoid",
        "no_renorm": "selected weights not renormalised",
        "no_routed_scale": "routed_scaling_factor not applied",
        "no_shared_expert": "shared expert missing",
        "relu_not_squared": "relu instead of relu^2 in experts/MLP",
        "norm_plus_one": "RMSNorm weights used as (1 + w)",
        "tied_head": "lm_head replaced by the embedding matrix",
    }

    def __init__(self, cfg_dict, tensors, dtype=torch.float32, variants=(), fp8_static=None, bf16_act=None):
        self.cfg = Config(cfg_dict)
        self.dtype = dtype
        # W8A8 static-activation parity mode (formats.md §3.3): {weight name: (E4M3 values, weight_scale,
        # input_scale)}; None/empty = W8A16 (dequantized weights, f32 activations), the project default.
        self.fp8 = {k: (wq.to(dtype), ws, xs) for k, (wq, ws, xs) in (fp8_static or {}).items()}
        self.fp8_stats = {}   # weight name -> [activations quantized, of which clamped at +-448]
        # bf16-activation mode (engine --arith bf16): the weight names whose inputs are rounded to bf16 first
        # (bf16_act_names_from_info); None/empty = f32 activations everywhere, the project default.
        self.bf16_act = frozenset(bf16_act or ())
        self.v = frozenset(variants)
        self.scan_chunk = None   # None: sequential scan (the oracle); Q: chunked SSD with chunk Q (training)
        self.route_gaps = None   # set to a list to record (layer prefix, min top-k selection margin) per call
        unknown = self.v - set(self.VARIANTS)
        if unknown:
            raise ValueError(f"unknown variants {sorted(unknown)}")
        c = self.cfg
        t = {}
        for k, v in tensors.items():
            # accept model.* (re-saved HF) as well as backbone.*; embedding vs embeddings
            if k.startswith("model."):
                k = "backbone." + k[len("model."):]
            if k == "backbone.embedding.weight":
                k = "backbone.embeddings.weight"
            t[k] = v.to(dtype) if v.is_floating_point() else v
        self.t = t
        if "tied_head" in self.v:
            t["lm_head.weight"] = t["backbone.embeddings.weight"]
        if "lm_head.weight" not in t:
            if not c.tie:
                raise KeyError("lm_head.weight missing (and tie_word_embeddings is false)")
            t["lm_head.weight"] = t["backbone.embeddings.weight"]
        self._check_shapes()

    def lin(self, x, name):
        """x @ W(name)^T - every weight product of the model goes through here. For FP8 modules in W8A8 parity
        mode: x_q = E4M3_RNE(clamp(x / input_scale, +-448)), y = ((x_q @ W_q^T) * input_scale) * weight_scale.
        For the modules of the bf16-activation mode: round_bf16_activation(x) @ W^T."""
        if name in self.bf16_act:
            x = round_bf16_activation(x)
        if name in self.fp8:
            wq, ws, xs = self.fp8[name]
            xd = (x / torch.tensor(xs, dtype=x.dtype)).detach().cpu().numpy()
            st = self.fp8_stats.setdefault(name, [0, 0])
            st[0] += xd.size
            st[1] += int(np.count_nonzero(np.abs(xd) > _formats.E4M3_MAX))
            xq = torch.from_numpy(_formats.e4m3_encode_rne(xd)).to(x.dtype)
            return ((xq @ wq.t()) * torch.tensor(xs, dtype=x.dtype)) * torch.tensor(ws, dtype=x.dtype)
        return x @ self.W(name).t()

    def W(self, name):
        try:
            return self.t[name]
        except KeyError:
            raise KeyError(f"missing tensor {name}") from None

    def _check_shapes(self):
        c = self.cfg
        exp = {"backbone.embeddings.weight": (c.V, c.H), "backbone.norm_f.weight": (c.H,),
               "lm_head.weight": (c.V, c.H)}
        for i, kind in enumerate(c.kinds):
            p = f"backbone.layers.{i}."
            exp[p + "norm.weight"] = (c.H,)
            if kind == "M":
                exp[p + "mixer.in_proj.weight"] = (c.DI + c.CD + c.NH, c.H)
                exp[p + "mixer.conv1d.weight"] = (c.CD, 1, c.K)
                exp[p + "mixer.out_proj.weight"] = (c.H, c.DI)
                exp[p + "mixer.norm.weight"] = (c.DI,)
            elif kind == "*":
                exp[p + "mixer.q_proj.weight"] = (c.HQ * c.HD, c.H)
                exp[p + "mixer.k_proj.weight"] = (c.HKV * c.HD, c.H)
                exp[p + "mixer.v_proj.weight"] = (c.HKV * c.HD, c.H)
                exp[p + "mixer.o_proj.weight"] = (c.H, c.HQ * c.HD)
            elif kind == "E":
                exp[p + "mixer.gate.weight"] = (c.E, c.H)
        for k, s in exp.items():
            got = tuple(self.W(k).shape)
            if got != s:
                raise ValueError(f"{k}: shape {got}, expected {s}")

    def new_state(self):
        return State(self.cfg.L)

    def _scan(self, x, dt, A, B, C, D, S0, hpg):
        """The reference's sequential scan; with scan_chunk = Q set, the chunked SSD form (for training)."""
        if self.scan_chunk:
            return ssm_scan_chunked(x, dt, A, B, C, D, S0, hpg, self.scan_chunk)
        return ssm_scan_sequential(x, dt, A, B, C, D, S0, hpg)

    # -- mixers ------------------------------------------------------------------------------------------

    def mamba(self, i, hn, ls):
        c = self.cfg
        p = f"backbone.layers.{i}.mixer."
        T = hn.shape[0]
        zxbcdt = self.lin(hn, p + "in_proj.weight")
        z = zxbcdt[:, :c.DI]
        xBC = zxbcdt[:, c.DI:c.DI + c.CD]
        dt_raw = zxbcdt[:, c.DI + c.CD:c.DI + c.CD + c.NH]
        # causal depthwise conv over [window(K-1 raw rows) ; new rows]; tap K-1 multiplies the newest input
        if ls.conv is None:
            ls.conv = torch.zeros(c.K - 1, c.CD, dtype=self.dtype)
        xpad = torch.cat([ls.conv, xBC], 0)                      # [K-1+T, CD]
        w = self.W(p + "conv1d.weight").reshape(c.CD, c.K)
        acc = torch.zeros(T, c.CD, dtype=self.dtype)
        if c.conv_bias:
            acc = acc + self.W(p + "conv1d.bias")
        for k in range(c.K):
            acc = acc + w[:, k] * xpad[k:k + T]
        if "conv_no_bias" in self.v and c.conv_bias:
            acc = acc - self.W(p + "conv1d.bias")
        if "conv_flip" in self.v:
            acc = self.W(p + "conv1d.bias").expand(T, c.CD).clone() if c.conv_bias else torch.zeros_like(acc)
            for k in range(c.K):
                acc = acc + w[:, c.K - 1 - k] * xpad[k:k + T]
        ls.conv = xpad[xpad.shape[0] - (c.K - 1):].clone()
        xBC = silu(acc)
        x = xBC[:, :c.DI].reshape(T, c.NH, c.P)
        B = xBC[:, c.DI:c.DI + c.G * c.N].reshape(T, c.G, c.N)
        C = xBC[:, c.DI + c.G * c.N:].reshape(T, c.G, c.N)
        dt = softplus20(dt_raw + (0.0 if "no_dt_bias" in self.v else self.W(p + "dt_bias")))
        if c.dt_lo > 0.0:
            dt = torch.clamp(dt, min=c.dt_lo)
        if "dt_clamp_min" in self.v:
            dt = torch.clamp(dt, min=float(c.raw.get("time_step_min", 0.001)))
        if math.isfinite(c.dt_hi):
            dt = torch.clamp(dt, max=c.dt_hi)
        A = -torch.exp(self.W(p + "A_log"))
        if ls.ssm is None:
            ls.ssm = torch.zeros(c.NH, c.P, c.N, dtype=self.dtype)
        D = self.W(p + "D")
        if "no_D" in self.v:
            D = torch.zeros_like(D)
        if "head_group_mod" in self.v:   # reorder B/C groups so repeat_interleave yields group h % G
            B = B[:, [h % c.G for h in range(c.NH)]]
            C = C[:, [h % c.G for h in range(c.NH)]]
            y, ls.ssm = self._scan(x, dt, A, B, C, D, ls.ssm, 1)
        else:
            y, ls.ssm = self._scan(x, dt, A, B, C, D, ls.ssm, c.NH // c.G)
        y = y.reshape(T, c.DI)
        nw = self.W(p + "norm.weight")
        if "norm_plus_one" in self.v:
            nw = nw + 1.0
        if "ungrouped_norm" in self.v:
            u = gated_group_rmsnorm(y, z, nw, 1, c.eps)
        elif "norm_before_gate" in self.v:
            yg = y.reshape(T, c.G, c.DI // c.G)
            yg = yg * torch.rsqrt((yg * yg).mean(dim=-1, keepdim=True) + c.eps)
            u = yg.reshape(T, c.DI) * nw * silu(z)
        else:
            u = gated_group_rmsnorm(y, z, nw, c.G, c.eps)
        return self.lin(u, p + "out_proj.weight")

    def attention(self, i, hn, ls, prefix=None):
        c = self.cfg
        p = prefix if prefix is not None else f"backbone.layers.{i}.mixer."
        T = hn.shape[0]
        q = self.lin(hn, p + "q_proj.weight").reshape(T, c.HQ, c.HD)
        k = self.lin(hn, p + "k_proj.weight").reshape(T, c.HKV, c.HD)
        v = self.lin(hn, p + "v_proj.weight").reshape(T, c.HKV, c.HD)
        past = 0 if ls.k is None else ls.k.shape[0]
        ls.k = k if ls.k is None else torch.cat([ls.k, k], 0)
        ls.v = v if ls.v is None else torch.cat([ls.v, v], 0)
        Lk = ls.k.shape[0]
        rep = c.HQ // c.HKV
        if "gqa_mod" in self.v:
            kk = ls.k.repeat(1, rep, 1)
            vv = ls.v.repeat(1, rep, 1)
        else:
            kk = ls.k.repeat_interleave(rep, dim=1)              # q head i uses kv head i // rep
            vv = ls.v.repeat_interleave(rep, dim=1)
        scale = (c.H // c.HQ) ** -0.5 if "attn_scale_hidden" in self.v else c.HD ** -0.5
        s = torch.einsum("thd,lhd->htl", q, kk) * scale           # [HQ, T, Lk]
        tpos = torch.arange(T)[:, None] + past
        lpos = torch.arange(Lk)[None, :]
        s = s.masked_fill((lpos > tpos)[None], float("-inf"))
        pr = torch.softmax(s, dim=-1)
        o = torch.einsum("htl,lhd->thd", pr, vv).reshape(T, c.HQ * c.HD)
        return self.lin(o, p + "o_proj.weight")

    def relu2_mlp(self, x, p):
        """The relu^2 MLP of weights p + up_proj / down_proj (experts, shared expert, dense MLP layers)."""
        a = torch.relu(self.lin(x, p + "up_proj.weight"))
        if "relu_not_squared" in self.v:
            return self.lin(a, p + "down_proj.weight")
        return self.lin(a * a, p + "down_proj.weight")

    def route(self, hn, p):
        """Returns (idx [T,k] ascending expert index, weights [T,k]) - nemotron_h.md §5.2."""
        c = self.cfg
        logits = self.lin(hn, p + "gate.weight")                 # [T, E]
        s = torch.softmax(logits, dim=-1) if "router_softmax" in self.v else torch.sigmoid(logits)
        bias_name = p + "gate.e_score_correction_bias"
        sel = s + self.t[bias_name] if bias_name in self.t else s.clone()
        if c.n_group > 1:
            # grouped top-k: group score = sum of its two largest biased scores (HF get_topk_indices:
            # .topk(2)[0].sum()); keep the topk_group best groups (ties -> lowest group index); mask the rest
            T = sel.shape[0]
            gs = sel.reshape(T, c.n_group, c.E // c.n_group)
            gscore = torch.sort(gs, dim=-1, descending=True).values[..., :2].sum(-1)   # [T, n_group]
            keep = topk_lowest_index(gscore, c.topk_group)
            mask = torch.zeros(T, c.n_group, dtype=torch.bool)
            mask.scatter_(1, keep, True)
            sel = sel.masked_fill(~mask.repeat_interleave(c.E // c.n_group, dim=1), GROUP_MASK_FILL)
        idx = topk_lowest_index(sel, c.topk)
        if self.route_gaps is not None and c.topk < sel.shape[1]:
            srt = torch.sort(sel, dim=-1, descending=True).values
            gap = (srt[:, c.topk - 1] - srt[:, c.topk]).min().item()
            self.route_gaps.append((p, gap))
        idx, _ = torch.sort(idx, dim=-1)                          # ascending expert order for summation
        w = torch.gather(sel if "router_biased_weights" in self.v else s, 1, idx)
        if c.norm_topk and "no_renorm" not in self.v:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        if "no_routed_scale" not in self.v:
            w = w * c.rscale
        return idx, w

    def moe(self, i, hn, prefix=None):
        c = self.cfg
        p = prefix if prefix is not None else f"backbone.layers.{i}.mixer."
        T = hn.shape[0]
        idx, w = self.route(hn, p)
        xin = hn
        if c.latent:
            xin = self.lin(hn, p + "fc1_latent_proj.weight")
        routed = torch.zeros(T, xin.shape[1], dtype=self.dtype)
        # loop experts ascending: each token receives its contributions in ascending expert order
        for e in range(c.E):
            hit = (idx == e)
            rows = hit.any(dim=1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            we = (w * hit).sum(dim=1)[rows]                       # exactly one hit per row
            out = self.relu2_mlp(xin[rows], p + f"experts.{e}.")
            routed[rows] = routed[rows] + we[:, None] * out
        if c.latent:
            routed = self.lin(routed, p + "fc2_latent_proj.weight")
        o = routed
        if (c.n_shared > 0 and p + "shared_experts.up_proj.weight" in self.t
                and "no_shared_expert" not in self.v):
            o = o + self.relu2_mlp(hn, p + "shared_experts.")
        return o

    def mlp(self, i, hn):
        p = f"backbone.layers.{i}.mixer."
        return self.relu2_mlp(hn, p)

    def norm(self, x, name):
        w = self.W(name)
        return rmsnorm(x, w + 1.0 if "norm_plus_one" in self.v else w, self.cfg.eps)

    # -- forward -----------------------------------------------------------------------------------------

    def hidden(self, ids, state, taps=None):
        """Run tokens `ids` (continuing `state`); returns post-norm_f hidden [T, H].

        taps: optional dict whose keys are 0-based block ids L; on return taps[L] holds the residual stream
        AFTER block L for these rows ([T, H], pre-norm; for the last block that is the input of norm_f) -
        the DFlash/DSpark target taps (dflash_dspark.md §1.1). Does not change the result."""
        c = self.cfg
        ids_t = torch.as_tensor(list(ids), dtype=torch.long)
        if ids_t.numel() == 0:
            raise ValueError("empty token list")
        if int(ids_t.min()) < 0 or int(ids_t.max()) >= c.V:
            raise ValueError("token id out of range")
        if taps is not None:
            bad = [k for k in taps if not (isinstance(k, int) and 0 <= k < c.L)]
            if bad:
                raise ValueError(f"tap layer ids {bad} out of range 0..{c.L - 1}")
        h = self.W("backbone.embeddings.weight")[ids_t]
        for i, kind in enumerate(c.kinds):
            hn = self.norm(h, f"backbone.layers.{i}.norm.weight")
            ls = state.layers[i]
            if kind == "M":
                o = self.mamba(i, hn, ls)
            elif kind == "*":
                o = self.attention(i, hn, ls)
            elif kind == "E":
                o = self.moe(i, hn)
            else:
                o = self.mlp(i, hn)
            h = h + o
            if taps is not None and i in taps:
                taps[i] = h.clone()
        state.pos += len(ids_t)
        return self.norm(h, "backbone.norm_f.weight")

    def logits(self, hf):
        return self.lin(hf, "lm_head.weight")

    def forward(self, ids, state):
        return self.logits(self.hidden(ids, state))

    # -- MTP (nemotron_h.md §6.2) ---------------------------------------------------------------------------------

    def new_mtp_state(self):
        return State(len(self.cfg.mtp_kinds))

    def mtp_step(self, h_postnorm, next_ids, mtp_state):
        """One MTP application for T slots: h_postnorm [T, H] (post-norm_f target hidden or previous MTP h'),
        next_ids [T] (the token after each slot). Appends to the MTP KV cache. Returns (logits [T,V], h' [T,H])."""
        c = self.cfg
        ids_t = torch.as_tensor(list(next_ids), dtype=torch.long)
        e = self.W("backbone.embeddings.weight")[ids_t]
        p0 = "mtp.layers.0."
        x = torch.cat([rmsnorm(e, self.W(p0 + "enorm.weight"), c.eps),
                       rmsnorm(h_postnorm.to(self.dtype), self.W(p0 + "hnorm.weight"), c.eps)], dim=1)
        x = self.lin(x, p0 + "eh_proj.weight")
        nsub = len(c.mtp_kinds)
        for j, kind in enumerate(c.mtp_kinds):
            p = f"mtp.layers.{j}."
            hn = rmsnorm(x, self.W(p + "norm.weight"), c.eps)
            if kind == "*":
                o = self.attention(None, hn, mtp_state.layers[j], prefix=p + "mixer.")
            elif kind == "E":
                o = self.moe(None, hn, prefix=p + "mixer.")
            elif kind == "-":
                o = self.relu2_mlp(hn, p + "mixer.")
            else:
                raise NotImplementedError("Mamba sub-layer in MTP module")
            x = x + o
        mtp_state.pos += len(ids_t)
        hp = rmsnorm(x, self.W(f"mtp.layers.{nsub - 1}.final_layernorm.weight"), c.eps)
        return self.logits(hp), hp


# ----------------------------------------------------------------------------------------------------------
# greedy generation / dump
# ----------------------------------------------------------------------------------------------------------

def greedy(model, prompt, n_gen, force_tokens=None, return_hidden=False):
    """Prefill `prompt` (logits for every position), then greedy-decode n_gen tokens g0..g{n-1}.

    g0 = argmax(last prefill row); each g_j (j < n-1) is then fed one token at a time -> one decode row.
    If force_tokens is given, the fed tokens are force_tokens[j] instead of the reference's own argmax
    (the returned `tokens` are still the reference's own argmax choices at every step).
    Returns (prefill_logits [T,V] np.float32, tokens list, decode_logits [n-1, V] np.float32[, hiddens]).
    """
    st = model.new_state()
    with torch.no_grad():
        hf = model.hidden(prompt, st)
        pre = model.logits(hf)
        hid = [hf]
        tokens = []
        dec = []
        row = pre[-1]
        for j in range(n_gen):
            g = argmax_lowest(row.to(torch.float64).numpy())
            tokens.append(g)
            if j == n_gen - 1:
                break
            feed = g if force_tokens is None else int(force_tokens[j])
            h1 = model.hidden([feed], st)
            row = model.logits(h1)[0]
            hid.append(h1)
            dec.append(row)
    pre_np = pre.to(torch.float32).numpy()
    V = pre_np.shape[1]
    dec_np = torch.stack(dec).to(torch.float32).numpy() if dec else np.zeros((0, V), np.float32)
    if return_hidden:
        return pre_np, tokens, dec_np, torch.cat(hid, 0)
    return pre_np, tokens, dec_np


def mtp_dump(model, prompt, tokens, hiddens):
    """MTP logits for each prompt slot i: pairs (h_i, t_{i+1}); the last slot uses the greedy token g0.
    hiddens: post-norm_f hidden rows (first len(prompt) rows are the prompt's). Returns [T, V] float32."""
    T = len(prompt)
    nxt = list(prompt[1:]) + [tokens[0]]
    st = model.new_mtp_state()
    with torch.no_grad():
        lg, _ = model.mtp_step(hiddens[:T], nxt, st)
    return lg.to(torch.float32).numpy()


def write_dump(prefix, prompt, tokens, vocab, pre, dec):
    meta = {"prompt": [int(x) for x in prompt], "tokens": [int(x) for x in tokens], "vocab": int(vocab),
            "prefill_rows": int(pre.shape[0]), "decode_rows": int(dec.shape[0])}
    with open(prefix + ".json", "w") as f:
        json.dump(meta, f)
    with open(prefix + ".f32", "wb") as f:
        f.write(np.ascontiguousarray(pre, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(dec, dtype="<f4").tobytes())


def read_dump(prefix):
    """Read PREFIX.json / PREFIX.f32 -> (meta, prefill [T,V], decode [R,V])."""
    with open(prefix + ".json") as f:
        meta = json.load(f)
    V = int(meta["vocab"])
    T = int(meta["prefill_rows"])
    R = int(meta["decode_rows"])
    data = np.fromfile(prefix + ".f32", dtype="<f4")
    if data.size != (T + R) * V:
        raise ValueError(f"{prefix}.f32: {data.size} floats, expected ({T}+{R})*{V}={(T + R) * V}")
    data = data.reshape(T + R, V)
    return meta, data[:T], data[T:]


def _parse_ids(s):
    return [int(x) for x in s.replace(" ", "").split(",") if x != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Nemotron-H PyTorch reference forward / greedy dump")
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--gen", type=int, default=1, help="number of greedy tokens (>= 1)")
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.json, PREFIX.f32)")
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--force-tokens", default=None, help="teacher-forced decode tokens (comma-separated)")
    ap.add_argument("--mtp-dump", action="store_true", help="also write PREFIX.mtp.f32 [T, V]")
    ap.add_argument("--fp8-static-activations", action="store_true",
                    help="FP8 layers: W8A8 static activation fake-quant (GPU parity) instead of W8A16")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, a.threads))
    if a.gen < 1:
        ap.error("--gen must be >= 1")
    cfg, tensors, info = load_checkpoint(a.model, return_info=True)
    model = NemotronH(cfg, tensors, dtype=torch.float64 if a.dtype == "f64" else torch.float32,
                      fp8_static=fp8_static_from_info(info) if a.fp8_static_activations else None)
    prompt = _parse_ids(a.ids)
    force = _parse_ids(a.force_tokens) if a.force_tokens else None
    pre, toks, dec, hid = greedy(model, prompt, a.gen, force_tokens=force, return_hidden=True)
    write_dump(a.out, prompt, toks, model.cfg.V, pre, dec)
    if a.mtp_dump:
        if model.cfg.n_mtp < 1:
            print("warning: config has no MTP layers (num_nextn_predict_layers=0); trying mtp.* anyway",
                  file=sys.stderr)
        lg = mtp_dump(model, prompt, toks, hid)
        with open(a.out + ".mtp.f32", "wb") as f:
            f.write(np.ascontiguousarray(lg, dtype="<f4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
