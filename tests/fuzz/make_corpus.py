#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): a few small,
valid inputs per target that reach each parser's features; libFuzzer and the gtest drivers
mutate from there. Rerun after changing it:  /usr/bin/python3 tests/fuzz/make_corpus.py"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from safetensors_file import encode as safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def byte_level_vocab():
    """GPT-2's byte -> printable code point map, as ByteLevel uses it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    shutil.rmtree(ROOT, ignore_errors=True)

    # safetensors_file
    put("safetensors_file", "f32_bf16", safetensors(
        [("a.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "BF16", [3], b"\x80\x3f" * 3)],
        meta={"format": "pt"}))
    put("safetensors_file", "quantized", safetensors(
        [("w.weight", "U8", [2, 8], bytes(range(16))), ("w.weight_scale", "F8_E4M3", [2, 1], b"\x38\x38"),
         ("w.weight_scale_2", "F32", [], struct.pack("<f", 0.5)), ("w.input_scale", "F32", [1], struct.pack("<f", 1))]))
    put("safetensors_file", "mlx_unpadded", safetensors(
        [("x.weight", "U32", [1, 2], b"\x01\x00\x00\x00" * 2), ("x.scales", "F16", [1, 1], b"\x00\x3c"),
         ("x.biases", "F16", [1, 1], b"\x00\x00"), ("e", "I64", [0, 4], b"")], pad=False))
    put("safetensors_file", "empty", safetensors([]))

    # config_json: model configs (list / pattern / MTP), quantization configs, drafters
    model = {"model_type": "nemotron_h", "hidden_size": 64, "vocab_size": 512,
             "layers_block_type": ["mamba", "moe", "attention", "mlp"], "num_hidden_layers": 4,
             "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 16,
             "conv_kernel": 4, "chunk_size": 16, "time_step_limit": [0.0, "Infinity"],
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
             "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 32, "routed_scaling_factor": 2.5,
             "num_nextn_predict_layers": 1, "mtp_layers_block_type": ["attention", "moe"],
             "eos_token_id": [2, 11], "bos_token_id": 1, "tie_word_embeddings": False}
    put("config_json", "model", json.dumps(model, indent=1))
    legacy = dict(model, hybrid_override_pattern="M-M*", num_nextn_predict_layers=0)
    del legacy["layers_block_type"]
    put("config_json", "model_pattern", json.dumps(legacy))
    mlx = dict(model, quantization={"group_size": 64, "bits": 4, "mode": "affine",
                                    "backbone.layers.1.mixer.gate": False,
                                    "lm_head": {"group_size": 64, "bits": 8}})
    put("config_json", "model_mlx", json.dumps(mlx))
    put("config_json", "hf_quant_config", json.dumps({
        "producer": {"name": "modelopt", "version": "0.44.0"},
        "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
                         "quantized_layers": {"backbone.layers.0.mixer.in_proj": {"quant_algo": "FP8"},
                                              "backbone.layers.1.mixer.experts.0.up_proj":
                                                  {"quant_algo": "W4A16_NVFP4", "group_size": 16}},
                         "exclude_modules": ["backbone.embeddings", "mtp*", "lm_head"]}}))
    put("config_json", "quantization_config", json.dumps(dict(model, quantization_config={
        "quant_method": "modelopt", "quant_algo": "NVFP4",
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                "input_activations": {"num_bits": 4}, "targets": ["backbone.layers.1.mixer.experts.0.up_proj"]}},
        "ignore": ["lm_head"], "kv_cache_scheme": {"num_bits": 8, "type": "float"}})))
    put("config_json", "dflash", json.dumps({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64,
        "vocab_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 128, "rms_norm_eps": 1e-6, "block_size": 8,
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 3]},
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}))
    put("config_json", "dspark", json.dumps({
        "architectures": ["DSparkDraftModel"], "num_hidden_layers": 1, "hidden_size": 64, "vocab_size": 512,
        "markov_rank": 2, "target_layer_ids": [0, 2], "use_sliding_window": True, "sliding_window": 64}))

    # Inputs libFuzzer found that once crashed (kept as regression seeds): parse_drafter_config
    # threw a JSON type_error on a non-object and on a non-string model_type / rope_type, and
    # divided INT64_MIN by -1 / overflowed on extreme integers.
    put("config_json", "regress_non_object", "61663333333e32")
    put("config_json", "regress_drafter_types", json.dumps({
        "architectures": ["DFlashDraftModel"], "model_type": 5, "hidden_size": -2 ** 63, "num_attention_heads": -1,
        "rope_parameters": {"rope_type": 7, "type": None}, "eagle_aux_hidden_state_layer_ids": [-2 ** 63, 3]}))
    put("config_json", "regress_drafter_taps", json.dumps({
        "architectures": ["DSparkDraftModel"], "num_hidden_layers": 10 ** 15, "num_target_layers": -2 ** 63}))

    # tokenizer_json: byte-level BPE with merges and added tokens, and two other pipelines
    v = byte_level_vocab()
    vocab = dict(v)
    merges = [["h", "e"], ["he", "l"], ["l", "o"], ["Ġ", "t"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    put("tokenizer_json", "byte_level", json.dumps({
        "version": "1.0", "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": True},
        "decoder": {"type": "ByteLevel"},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                     {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [len(vocab)], "tokens": ["<s>"]}}},
        "added_tokens": [{"id": len(vocab), "content": "<s>", "special": True},
                         {"id": len(vocab) + 1, "content": "<|im_start|>", "special": True}]}))
    sp = {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "ab": 5}
    sp.update({f"<0x{b:02X}>": 6 + b for b in range(256)})
    put("tokenizer_json", "sentencepiece", json.dumps({
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "model": {"type": "BPE", "vocab": sp, "merges": ["▁ a", "a b"], "byte_fallback": True, "unk_token": "<unk>",
                  "fuse_unk": True},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True}]}))
    put("tokenizer_json", "digits", json.dumps({
        "normalizer": {"type": "NFD"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                {"type": "ByteLevel", "add_prefix_space": True}]},
        "model": {"type": "BPE", "vocab": v, "merges": []}, "decoder": {"type": "ByteLevel"},
        "post_processor": {"type": "ByteLevel"}}))

    # Regression (libFuzzer): one huge id sized the id -> token table (2e9 entries, out of memory).
    put("tokenizer_json", "regress_huge_id", json.dumps({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000}, "merges": []},
        "added_tokens": [{"id": 1999999999, "content": "<x>", "special": True}]}))

    # tokenizer_roundtrip: text, code, specials, ill-formed UTF-8
    put("tokenizer_roundtrip", "prose", "The quick brown fox jumps over the lazy dog. 東京 天气很好 😀 café\n")
    put("tokenizer_roundtrip", "specials", "<|im_start|>user\nhi<|im_end|>\n<think>\n</think>\n")
    put("tokenizer_roundtrip", "illformed", b"ab\xc3 \x80\xf0\x9f\x98 12345   \t\n\xff\xfe")

    # template_engine: the constructs of the Nemotron templates, one feature per seed
    put("template_engine", "loop", "{%- for m in messages %}{{ loop.index }}:{{ m.role | upper }}"
                                   "{% if not loop.last %}, {% endif %}{%- endfor %}")
    put("template_engine", "ns_macro", "{% set ns = namespace(n=0) %}{% macro f(a, b=2) %}{{ a ~ b }}{% endmacro %}"
                                       "{% for x in xs if x > 1 %}{% set ns.n = ns.n + x %}{% endfor %}"
                                       "{{ f(ns.n) }}{{ xs[1:] | join(',') }}{{ d.items() | list | length }}")
    put("template_engine", "tools", "{%- if tools %}{% for t in tools %}{{ t.function.name }}"
                                    "{{ t.function.parameters | tojson }}{% endfor %}{% endif %}"
                                    "{%- for m in messages if m.tool_calls is defined %}{% for c in m.tool_calls %}"
                                    "{% for k, v in c.function.arguments | items %}{{ k }}={{ v }}{% endfor %}"
                                    "{% endfor %}{% endfor %}")
    put("template_engine", "strings", "{{ 'a,b'.split(',') }}{{ \"x\".startswith('x') }}{{ '  s '.strip() }}"
                                      "{% if messages[0].content is string and d is mapping %}{{ raise_exception('no') if false }}{% endif %}"
                                      "{# comment #}{{ add_generation_prompt }}")

    # output_parser: byte 0 picks the options (bit 0 starts in reasoning, bits 1-2 turn parsing
    # off) and the chunk size; the rest is generated text.
    call = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n")
    put("output_parser", "reasoning_call", "\x01I should look it up.\n</think>\nSure.\n" + call)
    put("output_parser", "plain_think", "\x10<think>hmm</think>\n\nThe answer is 4.")
    put("output_parser", "unterminated", "\x21" + call.split("</parameter>")[0] + "\n<parameter=x>{\"a\": [1]}")
    put("output_parser", "two_calls", "\x08" + call + call.replace("Paris", "Rome"))


main()
