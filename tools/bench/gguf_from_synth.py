#!/usr/bin/env python3
"""Convert a ModelOpt Nemotron-H MoE checkpoint (what `nemotron synth --format modelopt` writes) to the
GGUF that llama.cpp's own converter (convert_hf_to_gguf.py, NemotronHModel with --fp8-as-q8 and
--outtype bf16) emits for it: architecture `nemotron_h_moe`, the same tensor names, shapes, metadata
keys and per-tensor types. Used by tools/bench/vs_llama.sh for the side-by-side benchmark (issue 13).

    /usr/bin/python3 tools/bench/gguf_from_synth.py --llama-dir LLAMA_CPP_CHECKOUT --model DIR --out F.gguf

It imports gguf-py from the llama.cpp checkout (sys.path insert, nothing installed) and needs numpy
only (no torch, no transformers). Tensors are streamed: one tensor (one stacked expert tensor) in memory.

What each tensor becomes (the widths and byte layout match the engine's checkpoint):
  * NVFP4 (routed experts, shared expert, lm_head): ggml NVFP4 (type 40), REPACKED LOSSLESSLY. ModelOpt
    stores E2M1 nibbles pairwise (byte j = element 2j | element 2j+1 << 4) with one E4M3 scale per 16;
    ggml's block_nvfp4 holds 64 elements as 4 UE4M3 scales + 32 bytes, where byte j of each 16-element
    sub-block = element j | element j+8 << 4. Codes and scale bits are moved, never recomputed (the E4M3
    sign bit is dropped: ModelOpt scales are positive). The per-tensor `weight_scale_2` goes to the
    `.scale` tensor llama.cpp multiplies the output by (per expert: an [n_expert] vector), exactly as
    convert_hf_to_gguf.py's _nvfp4_pack / _repack_nvfp4 / _flush_nvfp4_experts do. Bytes: 36 per 64
    weights (0.5625 B/weight), identical to ModelOpt's 32 + 4.
  * FP8 E4M3 Mamba in_proj / out_proj: ggml has no FP8 type, so (like llama.cpp's --fp8-as-q8) they are
    dequantized (E4M3 x weight_scale, exact in f32) and REQUANTIZED to Q8_0 (int8 + f16 scale per 32):
    APPROXIMATE (about 0.3-0.5 % relative RMS error on these weights), and 34 bytes per 32 weights, i.e.
    6.25 % more bytes than FP8's 1 B/weight. The exact byte difference per decoded token is written to
    F.gguf.json (`extra_bytes_per_token`) so the roofline share of llama.cpp can be corrected.
  * bf16 embeddings and attention q/k/v/o: BF16, bytes copied verbatim (q and k rows permuted per head
    the way LlamaModel.permute does; attention scores are unchanged, the model has no RoPE).
  * Router (`ffn_gate_inp`): F32 as llama.cpp's converter forces it (the engine reads bf16: 2 more bytes
    per weight, also counted in extra_bytes_per_token). Norms, conv1d, A (= -exp(A_log)), D, dt bias,
    router bias: F32, reshaped as NemotronHModel.modify_tensors does.
  * The MTP head (`mtp.*`) is not exported (as with the converter's --no-mtp); the bench never drafts.
  * Vocabulary: a synthetic byte-level GPT-2 BPE vocabulary of the checkpoint's vocab_size (ids 0-2
    <unk> <s> </s>, 3-258 the bytes, the rest unused; --ids-as-text makes them user-defined `[PADn]`
    strings, so llama-simple takes and prints token ids). The checkpoint's tokenizer.json is not carried
    over: llama.cpp's converter knows pre-tokenizers only by the hash of published ones, and
    llama-bench feeds token ids, so the text side never matters for the benchmark.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np


def load_gguf(llama_dir: Path):
    sys.path.insert(0, str(llama_dir / "gguf-py"))
    import gguf  # noqa: E402  (from the checkout)

    return gguf


# ---------------------------------------------------------------- safetensors (numpy, memory-mapped)

ST_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8, "I8": np.int8,
             "F8_E4M3": np.uint8}


class SafeTensors:
    def __init__(self, model_dir: Path):
        index = model_dir / "model.safetensors.index.json"
        files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
            else ["model.safetensors"]
        self.entries: dict[str, tuple[Path, int, dict]] = {}
        for f in files:
            path = model_dir / f
            with open(path, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
            header.pop("__metadata__", None)
            for name, info in header.items():
                self.entries[name] = (path, 8 + n, info)
        self.maps: dict[Path, np.memmap] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self):
        return self.entries.keys()

    def dtype(self, name: str) -> str:
        return self.entries[name][2]["dtype"]

    def shape(self, name: str) -> list[int]:
        return list(self.entries[name][2]["shape"])

    def get(self, name: str) -> np.ndarray:
        path, base, info = self.entries[name]
        if path not in self.maps:
            self.maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        a, b = info["data_offsets"]
        raw = self.maps[path][base + a: base + b]
        return raw.view(ST_DTYPES[info["dtype"]]).reshape(info["shape"])

    def f32(self, name: str) -> np.ndarray:
        a = self.get(name)
        if self.dtype(name) == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        if self.dtype(name) == "F8_E4M3":
            return E4M3[a]
        return a.astype(np.float32)


def e4m3_table() -> np.ndarray:
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if s else v
    return t


E4M3 = e4m3_table()


# ---------------------------------------------------------------- repacks

def nvfp4_pack(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """ModelOpt NVFP4 ([out, in/2] nibbles, [out, in/16] E4M3) -> ggml block_nvfp4 rows ([out, in/64*36])."""
    out, nb = scale.shape
    assert nb % 4 == 0, f"NVFP4 input width {nb * 16} is not a multiple of 64"
    w = np.asarray(weight).reshape(out, nb, 8)
    vals = np.stack([w & 0x0F, w >> 4], axis=-1).reshape(out, nb, 16)
    qs = (vals[:, :, :8] | (vals[:, :, 8:] << 4)).astype(np.uint8)
    d = (np.asarray(scale) & 0x7F).astype(np.uint8)
    ns = nb // 4
    raw = np.concatenate([d.reshape(out, ns, 4), qs.reshape(out, ns, 32)], axis=-1)
    return np.ascontiguousarray(raw.reshape(out, ns * 36))


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """LlamaModel.permute (rows regrouped within each head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- vocabulary

def bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def synthetic_vocab(gguf, n_vocab: int, pad_type):
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.CONTROL] * 3
    tokens += bytes_to_unicode()
    types += [gguf.TokenType.NORMAL] * 256
    tokens.append("Ġt")  # one merge so the BPE tables are not empty
    types.append(gguf.TokenType.NORMAL)
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(pad_type)
    return tokens[:n_vocab], types[:n_vocab], ["Ġ t"]


# ---------------------------------------------------------------- self-check

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def modelopt_nvfp4(st: SafeTensors, hf: str, rows: int) -> np.ndarray:
    w = np.asarray(st.get(hf + ".weight")[:rows])
    codes = np.stack([w & 0x0F, w >> 4], axis=-1).reshape(rows, -1)
    s = E4M3[np.asarray(st.get(hf + ".weight_scale")[:rows])]
    return E2M1[codes] * np.repeat(s, 16, axis=1) * st.f32(hf + ".weight_scale_2").reshape(-1)[0]


def check(gguf, st: SafeTensors, path: Path, pattern: str) -> None:
    """Dequantize the first rows of a few written tensors with gguf-py's own ggml dequantizers and compare
    with the ModelOpt values: NVFP4 must match exactly, Q8_0 reports its requantization error."""
    r = gguf.GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    rows = 64

    def ggml_rows(name: str, qtype, n: int) -> np.ndarray:
        return gguf.quants.dequantize(np.asarray(by_name[name].data).reshape(-1, by_name[name].data.shape[-1])[:n],
                                      qtype)

    def scale_of(name: str, i: int = 0) -> float:
        t = by_name.get(name.replace(".weight", ".scale"))
        return 1.0 if t is None else float(np.asarray(t.data).reshape(-1)[i])

    T = gguf.GGMLQuantizationType
    e = pattern.index("E")
    m = pattern.index("M")
    cases = [(f"blk.{e}.ffn_up_shexp.weight", f"backbone.layers.{e}.mixer.shared_experts.up_proj")]
    if "lm_head.weight_scale" in st:
        cases.append(("output.weight", "lm_head"))
    for name, hf in cases:
        got = ggml_rows(name, T.NVFP4, rows) * scale_of(name)
        want = modelopt_nvfp4(st, hf, rows)
        if not np.array_equal(got, want):
            raise SystemExit(f"self-check: {name} differs from the ModelOpt values (max {np.abs(got - want).max()})")
    ex = by_name[f"blk.{e}.ffn_down_exps.weight"]
    per = np.asarray(ex.data)
    last = per.shape[0] - 1 if per.ndim == 3 else 0
    got = gguf.quants.dequantize(per[last][:rows], T.NVFP4) * scale_of(ex.name, last)
    want = modelopt_nvfp4(st, f"backbone.layers.{e}.mixer.experts.{last}.down_proj", rows)
    if not np.array_equal(got, want):
        raise SystemExit(f"self-check: {ex.name} expert {last} differs from the ModelOpt values")
    hf = f"backbone.layers.{m}.mixer.in_proj"
    got = ggml_rows(f"blk.{m}.ssm_in.weight", T.Q8_0, rows)
    want = E4M3[np.asarray(st.get(hf + ".weight")[:rows])] * st.f32(hf + ".weight_scale").reshape(-1)[0]
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    print(f"self-check: NVFP4 (shared expert, routed expert {last}, lm_head) bit-exact vs ModelOpt; "
          f"Q8_0 Mamba in_proj vs FP8: {100 * rel:.2f} % relative RMS error", file=sys.stderr)


# ---------------------------------------------------------------- conversion

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-dir", required=True, type=Path, help="llama.cpp checkout (for gguf-py)")
    ap.add_argument("--model", required=True, type=Path, help="ModelOpt checkpoint directory")
    ap.add_argument("--out", required=True, type=Path, help="output .gguf")
    ap.add_argument("--ids-as-text", action="store_true",
                    help="mark ids >= 259 user-defined instead of unused, so llama.cpp tools print them as "
                         "[PADn] and parse [PADn] in a prompt: token ids in and out, for comparing greedy "
                         "outputs with `nemotron run --ids`")
    args = ap.parse_args()

    gguf = load_gguf(args.llama_dir)
    T = gguf.GGMLQuantizationType
    cfg = json.loads((args.model / "config.json").read_text())
    st = SafeTensors(args.model)

    pattern: str = cfg["hybrid_override_pattern"]
    n_layer = len(pattern)
    H = cfg["hidden_size"]
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg.get("attention_head_dim")
    n_mh, mh_dim = cfg["mamba_num_heads"], cfg["mamba_head_dim"]
    d_inner = n_mh * mh_dim
    n_groups = cfg["n_groups"]
    E = cfg["n_routed_experts"]
    F = cfg["moe_intermediate_size"]
    n_vocab = cfg["vocab_size"]
    if n_vocab % 8:
        raise SystemExit("vocab_size must be a multiple of 8 (llama.cpp pads it; the synthetic one is)")

    arch = gguf.MODEL_ARCH.NEMOTRON_H_MOE
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[arch])

    # ---- metadata (the keys NemotronHModel / GraniteHybridModel / TextModel.set_gguf_parameters write)
    w.add_name(args.model.name)
    w.add_block_count(n_layer)
    w.add_context_length(2 ** 20)  # GraniteHybridModel: no RoPE -> 2^20
    w.add_embedding_length(H)
    w.add_feed_forward_length([F if c == "E" else 0 for c in pattern])
    w.add_head_count(n_head)
    w.add_head_count_kv([n_kv if c == "*" else 0 for c in pattern])
    w.add_layer_norm_eps(cfg.get("layer_norm_epsilon", cfg.get("norm_eps", 1e-5)))
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if "n_group" in cfg:
        w.add_expert_group_count(cfg["n_group"])
    if "topk_group" in cfg:
        w.add_expert_group_used_count(cfg["topk_group"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_ssm_conv_kernel(cfg["conv_kernel"])
    w.add_ssm_state_size(cfg["ssm_state_size"])
    w.add_ssm_group_count(n_groups)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_time_step_rank(n_mh)
    w.add_rope_scaling_finetuned(False)
    w.add_expert_feed_forward_length(F)
    w.add_expert_shared_feed_forward_length(cfg["moe_shared_expert_intermediate_size"])
    w.add_expert_shared_count(cfg.get("n_shared_experts", 1))
    w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", True)))
    w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_NVFP4)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges = synthetic_vocab(
        gguf, n_vocab, gguf.TokenType.USER_DEFINED if args.ids_as_text else gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg.get("bos_token_id", 1))
    eos = cfg.get("eos_token_id", 2)
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)  # Lightning lists [2, 11]
    w.add_pad_token_id(0)

    # ---- the tensor plan: (gguf name, byte or value array shape, numpy dtype, nbytes, ggml type, producer)
    plan: list[tuple[str, tuple, type, int, object, object]] = []
    extra = {"ssm_q8_0_vs_fp8": 0, "router_f32_vs_bf16": 0}
    stats = {}

    def gname(hf: str) -> str:
        n = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        if n is None:
            raise SystemExit(f"no GGUF name for {hf}")
        return n

    def add(name, shape, dtype, nbytes, qtype, fn, kind):
        plan.append((name, tuple(shape), dtype, nbytes, qtype, fn))
        stats[kind] = stats.get(kind, 0) + nbytes

    def add_f32(name, fn, shape):
        add(name, shape, np.float32, int(np.prod(shape)) * 4, None, lambda: np.ascontiguousarray(fn(), np.float32),
            "f32")

    def add_bf16(name, hf, permute_heads=0):
        rows, cols = st.shape(hf)
        assert st.dtype(hf) == "BF16", f"{hf}: expected BF16, got {st.dtype(hf)}"

        def fn(hf=hf, ph=permute_heads):
            a = st.get(hf)
            if ph:
                a = permute_qk(a, ph)
            return np.ascontiguousarray(a).view(np.uint8)
        add(name, (rows, cols * 2), np.uint8, rows * cols * 2, T.BF16, fn, "bf16")

    def add_nvfp4(name, hf, scale_name=True):
        rows = st.shape(hf + ".weight")[0]
        cols = st.shape(hf + ".weight_scale")[1] * 16
        nbytes = rows * cols // 64 * 36
        add(name, (rows, cols // 64 * 36), np.uint8, nbytes, T.NVFP4,
            lambda hf=hf: nvfp4_pack(st.get(hf + ".weight"), st.get(hf + ".weight_scale")), "nvfp4")
        for sfx, gsfx in ((".weight_scale_2", ".scale"), (".input_scale", ".input_scale")):
            if hf + sfx in st:
                v = st.f32(hf + sfx).reshape(-1)
                if not (v.size <= 1 and abs(float(v.sum()) - 1.0) < 1e-6):  # _write_scale_tensor
                    add_f32(name.replace(".weight", gsfx), lambda v=v: v, (v.size,))

    def add_fp8_as_q8(name, hf):
        rows, cols = st.shape(hf + ".weight")
        assert st.dtype(hf + ".weight") == "F8_E4M3", f"{hf}: expected FP8"
        assert cols % 32 == 0
        nbytes = rows * cols // 32 * 34
        extra["ssm_q8_0_vs_fp8"] += nbytes - rows * cols

        def fn(hf=hf):
            deq = E4M3[st.get(hf + ".weight")] * st.f32(hf + ".weight_scale").reshape(-1)[0]
            return gguf.quants.quantize(deq.astype(np.float32), T.Q8_0)
        add(name, (rows, cols // 32 * 34), np.uint8, nbytes, T.Q8_0, fn, "q8_0")

    add_bf16(gname("backbone.embeddings.weight"), "backbone.embeddings.weight")
    for il, kind in enumerate(pattern):
        p = f"backbone.layers.{il}"
        m = p + ".mixer"
        add_f32(gname(p + ".norm.weight"), lambda h=p: st.f32(h + ".norm.weight"), (H,))
        if kind == "M":
            add_fp8_as_q8(gname(m + ".in_proj.weight"), m + ".in_proj")
            conv = st.shape(m + ".conv1d.weight")  # [C, 1, K] -> squeeze -> [C, K]
            add_f32(gname(m + ".conv1d.weight"), lambda m=m: st.f32(m + ".conv1d.weight").reshape(conv[0], conv[2]),
                    (conv[0], conv[2]))
            if m + ".conv1d.bias" in st:
                add_f32(gname(m + ".conv1d.bias"), lambda m=m: st.f32(m + ".conv1d.bias"), (conv[0],))
            add_f32(gname(m + ".dt.bias"), lambda m=m: st.f32(m + ".dt_bias"), (n_mh,))
            add_f32(gname(m + ".A_log"), lambda m=m: -np.exp(st.f32(m + ".A_log")).reshape(-1, 1), (n_mh, 1))
            add_f32(gname(m + ".D"), lambda m=m: st.f32(m + ".D").reshape(-1, 1), (n_mh, 1))
            add_f32(gname(m + ".norm.weight"), lambda m=m: st.f32(m + ".norm.weight").reshape(n_groups, -1),
                    (n_groups, d_inner // n_groups))
            add_fp8_as_q8(gname(m + ".out_proj.weight"), m + ".out_proj")
        elif kind == "*":
            add_bf16(gname(m + ".q_proj.weight"), m + ".q_proj.weight", permute_heads=n_head)
            add_bf16(gname(m + ".k_proj.weight"), m + ".k_proj.weight", permute_heads=n_kv)
            add_bf16(gname(m + ".v_proj.weight"), m + ".v_proj.weight")
            add_bf16(gname(m + ".o_proj.weight"), m + ".o_proj.weight")
        elif kind == "E":
            gate = m + ".gate.weight"
            extra["router_f32_vs_bf16"] += int(np.prod(st.shape(gate))) * 2
            add_f32(gname(gate), lambda g=gate: st.f32(g), st.shape(gate))
            bias = m + ".gate.e_score_correction_bias"
            if bias in st:
                add_f32(gname(m + ".gate.e_score_correction.bias"), lambda b=bias: st.f32(b), (E,))
            for proj in ("up_proj", "down_proj"):
                hf0 = f"{m}.experts.0.{proj}"
                rows = st.shape(hf0 + ".weight")[0]
                cols = st.shape(hf0 + ".weight_scale")[1] * 16
                per = rows * cols // 64 * 36
                name = gname(f"model.layers.{il}.mlp.experts.{proj}.weight")
                add(name, (E, rows, cols // 64 * 36), np.uint8, E * per, T.NVFP4,
                    lambda m=m, proj=proj: np.stack([
                        nvfp4_pack(st.get(f"{m}.experts.{e}.{proj}.weight"),
                                   st.get(f"{m}.experts.{e}.{proj}.weight_scale")) for e in range(E)]), "nvfp4")
                for sfx, gsfx in ((".weight_scale_2", ".scale"), (".input_scale", ".input_scale")):
                    if hf0 + sfx in st:
                        v = np.array([float(st.f32(f"{m}.experts.{e}.{proj}{sfx}").sum()) for e in range(E)],
                                     dtype=np.float32)
                        if not np.allclose(v, 1.0, atol=1e-6):  # _write_scales_tensor
                            add_f32(name.replace(".weight", gsfx), lambda v=v: v, (E,))
            for proj in ("up_proj", "down_proj"):
                add_nvfp4(gname(f"{m}.shared_experts.{proj}.weight"), f"{m}.shared_experts.{proj}")
        else:
            raise SystemExit(f"layer {il}: block kind {kind!r} is not converted")
    add_f32(gname("backbone.norm_f.weight"), lambda: st.f32("backbone.norm_f.weight"), (H,))
    if "lm_head.weight_scale" in st:
        add_nvfp4(gname("lm_head.weight"), "lm_head")
    else:
        add_bf16(gname("lm_head.weight"), "lm_head.weight")

    for name, shape, dtype, nbytes, qtype, _ in plan:
        w.add_tensor_info(name, shape, np.dtype(dtype), nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, dtype, nbytes, qtype, fn) in enumerate(plan):
        data = fn()
        if data.nbytes != nbytes:
            raise SystemExit(f"{name}: produced {data.nbytes} bytes, planned {nbytes}")
        w.write_tensor_data(data)
        if (i + 1) % 20 == 0 or i + 1 == len(plan):
            print(f"  {i + 1}/{len(plan)} tensors written", file=sys.stderr)
    w.close()
    check(gguf, st, args.out, pattern)

    # Per decoded token, llama.cpp reads these bytes beyond the engine's layout: every Mamba projection
    # (Q8_0 instead of FP8) and every router (F32 instead of bf16); everything else is byte-identical.
    side = {"tensors": len(plan), "bytes_by_type": stats,
            "extra_bytes_per_token": extra["ssm_q8_0_vs_fp8"] + extra["router_f32_vs_bf16"], **extra}
    Path(str(args.out) + ".json").write_text(json.dumps(side, indent=1) + "\n")
    print(f"wrote {args.out} ({len(plan)} tensors; {json.dumps(stats)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
