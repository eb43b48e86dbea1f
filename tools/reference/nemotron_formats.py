#!/usr/bin/python3
"""Independent dequantizers and checkpoint reader for the oracle (spec shared/spec/formats.md).

Written from the format spec (shared/spec/formats.md) only (§1 safetensors, §2 NVFP4, §3 FP8, §4 ModelOpt config, §5 MLX affine), not from
the C++ engine.  Everything is decoded from bit layouts with numpy; the results are float32 numpy arrays.

    raw = read_safetensors_raw(path)             # {name: RawTensor(dtype, shape, bytes)}; unaligned data is fine
    e2m1_decode(u8)                               # packed codes -> values, low nibble = even element
    e4m3_decode(u8)                               # e4m3fn bytes -> float32; NaN codes (0x7F/0xFF) raise
    e4m3_encode_rne(x)                            # float -> e4m3fn value (clamp ±448, RNE), for W8A8 parity mode
    nvfp4_dequant(w_u8, scale_e4m3, scale_2)      # w = E2M1 * (E4M3(s) * scale_2)
    fp8_dequant(w_e4m3, weight_scale)             # W = E4M3 * weight_scale
    mlx_affine_dequant(w_u32, scales, biases, bits, group)   # w = scale*q + bias, element k at bits k*bits
    load_logical(model_dir) -> (cfg, {HF logical name: float32 ndarray}, info)

`info` records, per logical weight, how it was stored ({"format": "nvfp4"|"fp8"|"mlx4"|..., ...}) and for FP8
modules the raw E4M3 values and both scales (used by the reference's W8A8 static-activation parity mode).
"""
import fnmatch
import json
import os
import re
import struct

import numpy as np

# ----------------------------------------------------------------------------------------------------------
# safetensors (formats.md §1): u64le N | N bytes JSON | data; offsets relative to 8+N; no alignment assumed
# ----------------------------------------------------------------------------------------------------------

_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
         "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64}


class RawTensor:
    __slots__ = ("dtype", "shape", "data", "name")

    def __init__(self, name, dtype, shape, data):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.data = data   # bytes

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def u8(self):
        return np.frombuffer(self.data, dtype=np.uint8).reshape(self.shape)

    def u32(self):
        if self.dtype not in ("U32", "I32"):
            raise ValueError(f"{self.name}: expected U32, got {self.dtype}")
        return np.frombuffer(self.data, dtype="<u4").reshape(self.shape)

    def floats(self):
        """Widen a float tensor to float32 (BF16 = high 16 bits of an f32)."""
        if self.dtype == "BF16":
            u = np.frombuffer(self.data, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32).reshape(self.shape)
        if self.dtype == "F16":
            return np.frombuffer(self.data, dtype="<f2").astype(np.float32).reshape(self.shape)
        if self.dtype == "F32":
            return np.frombuffer(self.data, dtype="<f4").astype(np.float32).reshape(self.shape)
        if self.dtype == "F64":
            return np.frombuffer(self.data, dtype="<f8").astype(np.float32).reshape(self.shape)
        raise ValueError(f"{self.name}: {self.dtype} is not a plain float dtype")

    def scalar(self):
        a = self.floats().reshape(-1)
        if a.size != 1:
            raise ValueError(f"{self.name}: expected a scalar ([] or [1]), got shape {list(self.shape)}")
        return np.float32(a[0])


def read_safetensors_raw(path):
    """Parse one safetensors file with the §1.1 validation. Returns ({name: RawTensor}, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: too short")
    n = struct.unpack("<Q", buf[:8])[0]
    if n > 100_000_000 or 8 + n > len(buf):
        raise ValueError(f"{path}: bad header length {n}")
    header = json.loads(buf[8:8 + n].decode("utf-8"))   # json tolerates leading/trailing whitespace
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    spans = []
    out = {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _BITS:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        shape = [int(s) for s in info["shape"]]
        b, e = (int(x) for x in info["data_offsets"])
        numel = 1
        for s in shape:
            numel *= s
        if numel * _BITS[dt] % 8 or e - b != numel * _BITS[dt] // 8:
            raise ValueError(f"{path}: {name}: {e - b} bytes for {dt} {shape}")
        if base + e > len(buf):
            raise ValueError(f"{path}: {name}: data past end of file")
        spans.append((b, e, name))
        out[name] = RawTensor(name, dt, shape, buf[base + b: base + e])   # bytes slice: any alignment
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise ValueError(f"{path}: {name}: hole/overlap at data offset {pos} (begins at {b})")
        pos = e
    if base + pos != len(buf):
        raise ValueError(f"{path}: {len(buf) - base - pos} trailing bytes")
    return out, meta


def read_checkpoint_raw(model_dir):
    """All tensors of a (possibly sharded) checkpoint. Returns ({name: RawTensor}, merged metadata)."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors in {model_dir}")
    tensors, meta = {}, {}
    for fn in files:
        t, m = read_safetensors_raw(os.path.join(model_dir, fn))
        for k in t:
            if k in tensors:
                raise ValueError(f"{model_dir}: tensor {k} appears in more than one shard")
        tensors.update(t)
        meta.update(m)
    return tensors, meta


# ----------------------------------------------------------------------------------------------------------
# element decoders (formats.md §2.3, §2.4)
# ----------------------------------------------------------------------------------------------------------

def _e2m1_value(code):
    """E2M1 by its bit layout: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa; exp 0 = subnormal."""
    s = -1.0 if code & 8 else 1.0
    e = (code >> 1) & 3
    m = code & 1
    mag = m * 0.5 if e == 0 else (1.0 + 0.5 * m) * 2.0 ** (e - 1)
    return s * mag


E2M1_TABLE = np.array([_e2m1_value(c) for c in range(16)], dtype=np.float32)


def _e4m3_value(b):
    """e4m3fn by its bit layout: sign, 4-bit exponent (bias 7), 3-bit mantissa; no Inf; S.1111.111 = NaN."""
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0xF
    m = b & 7
    if e == 15 and m == 7:
        return float("nan")
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_TABLE = np.array([_e4m3_value(b) for b in range(256)], dtype=np.float32)
E4M3_MAX = 448.0


def e2m1_decode(packed):
    """uint8 [..., n] -> float32 [..., 2n]; element 2j = low nibble of byte j, 2j+1 = high nibble."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.shape[:-1] + (p.shape[-1] * 2,), dtype=np.float32)
    out[..., 0::2] = E2M1_TABLE[p & 0xF]
    out[..., 1::2] = E2M1_TABLE[p >> 4]
    return out


def e4m3_decode(b, what="F8_E4M3 tensor"):
    """uint8 e4m3fn bytes -> float32. NaN codes are an error (no valid checkpoint stores them)."""
    b = np.asarray(b, dtype=np.uint8)
    if np.any((b & 0x7F) == 0x7F):
        n = int(np.count_nonzero((b & 0x7F) == 0x7F))
        raise ValueError(f"{what}: {n} NaN code(s) (0x7F/0xFF)")
    return E4M3_TABLE[b]


# all finite non-negative e4m3 values, ascending (codes 0x00..0x7E)
_E4M3_POS = E4M3_TABLE[:0x7F].astype(np.float64)


def e4m3_encode_rne(x):
    """float -> nearest e4m3fn value (as float32), after clamping to ±448; ties go to the even mantissa
    (= even code, since consecutive codes alternate mantissa parity). Works on arrays."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.searchsorted(_E4M3_POS, a, side="left")            # first value >= a
    hi = np.clip(hi, 0, len(_E4M3_POS) - 1)
    lo = np.clip(hi - 1, 0, len(_E4M3_POS) - 1)
    vh = _E4M3_POS[hi]
    vl = _E4M3_POS[lo]
    dh = vh - a
    dl = a - vl
    pick_hi = (dh < dl) | ((dh == dl) & (hi % 2 == 0))
    code = np.where(a == vh, hi, np.where(pick_hi, hi, lo))
    v = _E4M3_POS[code]
    v = np.where(np.isnan(x), np.nan, np.copysign(v, x))
    return v.astype(np.float32)


# ----------------------------------------------------------------------------------------------------------
# tensor dequantizers (formats.md §2.5, §3.2, §5.1)
# ----------------------------------------------------------------------------------------------------------

def nvfp4_dequant(w_u8, scale_e4m3, scale_2, block=16, what="NVFP4"):
    """w U8 [o, i/2], weight_scale F8_E4M3 [o, i/16], weight_scale_2 F32 scalar -> float32 [o, i].
    FP32 order: s = E4M3(scale) * scale_2 (one rounding), then w = E2M1 * s."""
    w_u8 = np.asarray(w_u8, dtype=np.uint8)
    o, half = w_u8.shape
    i = half * 2
    sc = np.asarray(scale_e4m3, dtype=np.uint8)
    if sc.shape != (o, i // block) or i % block:
        raise ValueError(f"{what}: weight_scale shape {list(sc.shape)} does not match weight [{o}, {half}] "
                         f"(expected [{o}, {i // block}])")
    s = e4m3_decode(sc, what + " weight_scale") * np.float32(scale_2)      # float32 * float32
    vals = e2m1_decode(w_u8).reshape(o, i // block, block)
    return (vals * s[:, :, None]).astype(np.float32).reshape(o, i)


def fp8_dequant(w_e4m3, weight_scale, what="FP8"):
    """W = E4M3(weight) * weight_scale (FP32)."""
    return (e4m3_decode(w_e4m3, what + " weight") * np.float32(weight_scale)).astype(np.float32)


def mlx_unpack(w_u32, bits):
    """U32 [..., n] -> uint32 codes [..., n*32/bits]; element k of each word at bits [k*bits, (k+1)*bits)."""
    if 32 % bits:
        raise ValueError(f"MLX {bits}-bit packing not supported (only power-of-two bits)")
    per = 32 // bits
    w = np.asarray(w_u32, dtype=np.uint32)
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))
    q = (w[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return q.reshape(w.shape[:-1] + (w.shape[-1] * per,))


def mlx_affine_dequant(w_u32, scales, biases, bits, group, what="MLX"):
    """w = scale * q + bias per group of `group` inputs; works for [o, ...] and stacked [E, o, ...]."""
    q = mlx_unpack(w_u32, bits).astype(np.float32)
    scales = np.asarray(scales, dtype=np.float32)
    biases = np.asarray(biases, dtype=np.float32)
    n_in = q.shape[-1]
    if n_in % group or scales.shape != q.shape[:-1] + (n_in // group,) or biases.shape != scales.shape:
        raise ValueError(f"{what}: scales {list(scales.shape)} / biases {list(biases.shape)} do not match "
                         f"{n_in} inputs with group {group} (bits {bits}, weight {list(np.shape(w_u32))})")
    qg = q.reshape(q.shape[:-1] + (n_in // group, group))
    w = scales[..., None] * qg + biases[..., None]
    return w.astype(np.float32).reshape(q.shape)


# ----------------------------------------------------------------------------------------------------------
# quantization configs (formats.md §4 ModelOpt, §5.5 MLX) - own simple reading
# ----------------------------------------------------------------------------------------------------------

def _read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def modelopt_layers(model_dir, cfg):
    """Return ({module prefix: algo (upper-case)}, exclude globs, default algo or None) from hf_quant_config.json
    and/or config.json quantization_config (quant_method modelopt). Both are read; where both list a module they
    must agree."""
    layers, excl, default = {}, [], None
    sources = []
    hq = _read_json(os.path.join(model_dir, "hf_quant_config.json"))
    if hq and isinstance(hq.get("quantization"), dict):
        sources.append(("hf_quant_config.json", hq["quantization"], "exclude_modules"))
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict) and str(qc.get("quant_method", "")).lower().startswith("modelopt"):
        sources.append(("config.json quantization_config", qc, "ignore"))
    for src, q, exkey in sources:
        algo = str(q.get("quant_algo") or "").upper()
        ql = q.get("quantized_layers") or {}
        for mod, v in ql.items():
            a = str(v.get("quant_algo") if isinstance(v, dict) else v).upper()
            if mod in layers and layers[mod] != a:
                raise ValueError(f"{src}: {mod} is {a} but another config says {layers[mod]}")
            layers[mod] = a
        excl += list(q.get(exkey) or q.get("exclude_modules") or [])
        if algo and algo != "MIXED_PRECISION":
            if default is not None and default != algo:
                raise ValueError(f"quant_algo disagrees between configs: {default} vs {algo}")
            default = algo
    return layers, excl, default, bool(sources)


def mlx_quant(cfg):
    """config.json "quantization" (or an MLX-style "quantization_config") -> dict or None."""
    q = cfg.get("quantization")
    if not isinstance(q, dict):
        qc = cfg.get("quantization_config")
        if isinstance(qc, dict) and "bits" in qc and "group_size" in qc:
            q = qc
    return q if isinstance(q, dict) else None


def mlx_params(q, module):
    """(bits, group_size, mode) for one module path: a per-module override dict wins over the global entry."""
    ov = q.get(module)
    bits, group, mode = q.get("bits", 4), q.get("group_size", 64), q.get("mode", "affine")
    if isinstance(ov, dict):
        bits, group, mode = ov.get("bits", bits), ov.get("group_size", group), ov.get("mode", mode)
    return int(bits), int(group), str(mode)


# ----------------------------------------------------------------------------------------------------------
# logical checkpoint: every format -> HF names, float32
# ----------------------------------------------------------------------------------------------------------

_NVFP4_ALGOS = {"NVFP4", "W4A16_NVFP4", "NVFP4_AWQ", "W4A4_NVFP4"}
_FP8_ALGOS = {"FP8"}
_EXPERT_STACK = re.compile(r"^(.*\.mixer\.)switch_mlp\.(fc1|fc2)$")


def _module(name):
    return name.rsplit(".", 1)[0] if "." in name else ""


def _is_excluded(module, globs):
    return any(fnmatch.fnmatchcase(module, g) for g in globs)


def load_logical(model_dir):
    """Read config + every tensor and return (cfg, {HF name: float32 ndarray}, info).

    Format decision per module: ModelOpt (hf_quant_config.json / config.json quantization_config) by exact module
    prefix in quantized_layers (single-algo configs: every module with quantizer tensors that is not excluded),
    cross-checked against the stored dtypes; MLX ("quantization" in config.json) by the presence of `.scales`,
    bits/group from the per-module override or the global entry. Plain float tensors are widened."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    raw, meta = read_checkpoint_raw(model_dir)
    mo_layers, mo_excl, mo_default, is_modelopt = modelopt_layers(model_dir, cfg)
    mq = mlx_quant(cfg)
    is_mlx = (mq is not None and not is_modelopt) or str(meta.get("format", "")).lower() == "mlx"
    out, info = {}, {}
    used = set()

    # --- ModelOpt quantized modules ----------------------------------------------------------------------
    modules = {}
    for name in raw:
        modules.setdefault(_module(name), []).append(name.rsplit(".", 1)[-1])
    for mod, leaves in sorted(modules.items()):
        wname = mod + ".weight" if mod else "weight"
        if wname not in raw:
            continue
        w = raw[wname]
        algo = None
        if is_modelopt:
            algo = mo_layers.get(mod)
            if algo is None and mo_default and not _is_excluded(mod, mo_excl) and "weight_scale" in leaves:
                algo = mo_default
            if algo is not None and _is_excluded(mod, mo_excl):
                raise ValueError(f"{mod}: listed as {algo} but also matched by exclude_modules")
        if algo in _NVFP4_ALGOS:
            sc, s2 = raw.get(mod + ".weight_scale"), raw.get(mod + ".weight_scale_2")
            if w.dtype != "U8" or sc is None or sc.dtype != "F8_E4M3" or s2 is None or s2.dtype != "F32":
                raise ValueError(f"{mod}: config says {algo} but tensors are weight {w.dtype}, weight_scale "
                                 f"{sc and sc.dtype}, weight_scale_2 {s2 and s2.dtype}")
            out[wname] = nvfp4_dequant(w.u8(), sc.u8(), s2.scalar(), what=mod)
            info[wname] = {"format": "nvfp4", "algo": algo}
            used.update([wname, mod + ".weight_scale", mod + ".weight_scale_2"])
            if mod + ".input_scale" in raw:
                used.add(mod + ".input_scale")    # W4A4 activation scale: ignored (W4A16 execution)
        elif algo in _FP8_ALGOS:
            sc = raw.get(mod + ".weight_scale")
            if w.dtype != "F8_E4M3" or sc is None or sc.dtype != "F32":
                raise ValueError(f"{mod}: config says FP8 but tensors are weight {w.dtype}, weight_scale "
                                 f"{sc and sc.dtype}")
            ws = sc.scalar()
            wq = e4m3_decode(w.u8(), mod + ".weight")
            out[wname] = (wq * ws).astype(np.float32)
            ent = {"format": "fp8", "wq": wq, "weight_scale": ws}
            if mod + ".input_scale" in raw:
                ent["input_scale"] = raw[mod + ".input_scale"].scalar()
                used.add(mod + ".input_scale")
            info[wname] = ent
            used.update([wname, mod + ".weight_scale"])
        elif algo is not None:
            raise ValueError(f"{mod}: unsupported quant_algo {algo}")
        elif is_mlx and mod + ".scales" in raw:
            bits, group, mode = mlx_params(mq or {}, mod)
            if mode != "affine":
                raise ValueError(f"{mod}: MLX mode {mode} not supported")
            sc, bi = raw[mod + ".scales"], raw.get(mod + ".biases")
            if bi is None:
                raise ValueError(f"{mod}: MLX affine weight without .biases")
            if w.dtype != "U32" or w.shape[-1] * 32 // bits != sc.shape[-1] * group:
                raise ValueError(f"{mod}: MLX weight {w.dtype} {list(w.shape)} vs scales {list(sc.shape)} "
                                 f"with bits {bits}, group {group}")
            deq = mlx_affine_dequant(w.u32(), sc.floats(), bi.floats(), bits, group, what=mod)
            used.update([wname, mod + ".scales", mod + ".biases"])
            m = _EXPERT_STACK.match(mod)
            if m:
                proj = "up_proj" if m.group(2) == "fc1" else "down_proj"
                for e in range(deq.shape[0]):
                    n = f"{m.group(1)}experts.{e}.{proj}.weight"
                    out[n] = deq[e]
                    info[n] = {"format": f"mlx{bits}", "group": group, "stacked": mod}
            else:
                out[wname] = deq
                info[wname] = {"format": f"mlx{bits}", "group": group}
        else:
            for leaf in ("weight_scale", "weight_scale_2", "input_scale", "scales", "biases"):
                if leaf in leaves:
                    raise ValueError(f"{mod}: has .{leaf} but the config does not declare it quantized")
            if w.dtype in ("U8", "F8_E4M3", "U32"):
                raise ValueError(f"{mod}: weight stored as {w.dtype} but the config does not declare it quantized")

    # --- everything else: plain floats (+ MLX layout fixes) -------------------------------------------------
    for name, t in raw.items():
        if name in used:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("k_scale", "v_scale"):
            continue   # FP8 KV-cache scales: unused with an f32 cache (formats.md §3.5)
        a = t.floats()
        m = _EXPERT_STACK.match(_module(name))
        if m:  # unquantized stacked experts (bf16 switch_mlp)
            proj = "up_proj" if m.group(2) == "fc1" else "down_proj"
            for e in range(a.shape[0]):
                out[f"{m.group(1)}experts.{e}.{proj}.{leaf}"] = a[e]
            continue
        if is_mlx and name.endswith("conv1d.weight") and a.ndim == 3 and a.shape[2] == 1:
            a = np.ascontiguousarray(a.transpose(0, 2, 1))   # MLX [C, K, 1] -> HF [C, 1, K]
        out[name] = a
        info.setdefault(name, {"format": t.dtype.lower()})
    return cfg, out, info
