#!/usr/bin/python3
"""Generates a varied tokenizer test corpus (JSON array of strings) from a seed.

Nothing is hand-picked: every string is drawn at random from generators for English
prose (slices of local text files), source code, CJK, emoji (incl. ZWJ sequences,
modifiers, flags), combining-mark stacks, long whitespace runs, digit runs, contractions
in random case, embedded special tokens and random assigned code points.

Only code points assigned in this Python's Unicode version (14.0 on Debian 12, the same
as PCRE2 10.42) are used, so the JS reference (newer Unicode) classifies them the same way.
U+0085 and U+FEFF are left out: JavaScript's `\\s` disagrees with Oniguruma's (the Rust
`tokenizers` crate, which we follow) on exactly these two.
Usage: gen_corpus.py --seed 1 --count 400 [--bytes N] > corpus.json
"""
import argparse
import glob
import json
import random
import unicodedata as ud

EXCLUDE = {0x85, 0xFEFF}


def assigned(cp):
    if cp in EXCLUDE or 0xD800 <= cp <= 0xDFFF:
        return False
    return ud.category(chr(cp)) not in ('Cn', 'Cs')


def text_sources():
    files = sorted(glob.glob('/usr/share/common-licenses/*'))
    files += sorted(glob.glob('/usr/lib/python3*/*.py'))[:60]
    out = []
    for f in files:
        try:
            with open(f, encoding='utf-8') as fh:
                out.append(fh.read())
        except (OSError, UnicodeDecodeError):
            pass
    return [t for t in out if len(t) > 200] or ['The quick brown fox jumps over the lazy dog. ' * 20]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.texts = text_sources()
        self.marks = [c for c in range(0x300, 0x370)] + [c for c in range(0x1AB0, 0x1ABF)] + \
                     [c for c in range(0x20D0, 0x20F1)] + [0x093C, 0x0941, 0x0E31, 0x0E34, 0x05B0, 0x0651]
        self.marks = [c for c in self.marks if assigned(c)]
        self.all_cps = None

    def slice_of(self, n):
        t = self.r.choice(self.texts)
        i = self.r.randrange(0, max(1, len(t) - n))
        return t[i:i + n]

    def prose(self):
        return self.slice_of(self.r.randint(1, 400))

    def code(self):
        return self.slice_of(self.r.randint(20, 600))

    def cjk(self):
        r = self.r
        pools = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x3000, 0x303F),
                 (0xFF01, 0xFF5E), (0x20000, 0x2A6DF)]
        out = []
        for _ in range(r.randint(1, 60)):
            a, b = r.choice(pools)
            cp = r.randint(a, b)
            if assigned(cp):
                out.append(chr(cp))
            if r.random() < 0.1:
                out.append(r.choice([' ', '\n', 'abc', '123', '。', ', ']))
        return ''.join(out)

    def emoji(self):
        r = self.r
        base = [c for c in range(0x1F300, 0x1FAFF) if assigned(c)]
        out = []
        for _ in range(r.randint(1, 12)):
            k = r.random()
            e = chr(r.choice(base))
            if k < 0.2:
                e += chr(r.randint(0x1F3FB, 0x1F3FF))  # skin tone
            elif k < 0.35:
                e += '\u200d' + chr(r.choice(base))  # ZWJ sequence
            elif k < 0.45:
                e = chr(0x1F1E6 + r.randrange(26)) + chr(0x1F1E6 + r.randrange(26))  # flag
            elif k < 0.55:
                e += '\ufe0f'
            out.append(e)
            if r.random() < 0.3:
                out.append(r.choice([' ', '', 'ok', '!', '\n']))
        return ''.join(out)

    def combining(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 20)):
            out.append(r.choice('aeiouAEIOUnNcCsSzZ  xyαβγабв'))
            for _ in range(r.choice([0, 1, 1, 2, 3, 5])):
                out.append(chr(r.choice(self.marks)))
        return ''.join(out)

    def whitespace(self):
        r = self.r
        ws = [' ', ' ', ' ', '\t', '\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2009', '\u000b', '\u000c']
        out = []
        for _ in range(r.randint(1, 8)):
            out.append(''.join(r.choice(ws) for _ in range(r.choice([1, 2, 3, 7, 16, 50, 200]))))
            if r.random() < 0.7:
                out.append(r.choice(['word', 'x', '1', '!', 'def f():', '中', '😀']))
        return ''.join(out)

    def digits(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 10)):
            n = ''.join(r.choice('0123456789') for _ in range(r.randint(1, 30)))
            sep = r.choice(['', ' ', ',', '.', '-', 'e', '\n', 'x', '٣', '５'])
            out.append(n + sep)
        return ''.join(out)

    def contractions(self):
        r = self.r
        words = ["it", "we", "they", "you", "I", "she", "don", "can", "won"]
        suf = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "’s", "'x"]
        return ' '.join(r.choice(words) + r.choice(suf) for _ in range(r.randint(1, 10)))

    def specials(self):
        r = self.r
        toks = ['<|im_start|>', '<|im_end|>', '<think>', '</think>', '<|endoftext|>',
                '<|begin_of_text|>', '<tool_call>', '<|endofprompt|>', '<|im_start', '|>']
        out = []
        for _ in range(r.randint(1, 8)):
            out.append(r.choice(toks))
            out.append(r.choice(['', ' ', 'user\n', 'hi', '\n\n', self.prose()[:20]]))
        return ''.join(out)

    def random_cps(self):
        r = self.r
        out = []
        while len(out) < r.randint(1, 40):
            cp = r.choice([r.randint(0x20, 0x7F), r.randint(0x80, 0x800), r.randint(0x800, 0x10000),
                           r.randint(0x10000, 0x30000)])
            if assigned(cp):
                out.append(chr(cp))
        return ''.join(out)

    def mixed(self):
        gens = [self.prose, self.code, self.cjk, self.emoji, self.combining, self.whitespace, self.digits,
                self.contractions, self.specials, self.random_cps]
        return ''.join(self.r.choice(gens)() for _ in range(self.r.randint(2, 5)))

    def one(self):
        gens = [self.prose, self.code, self.cjk, self.emoji, self.combining, self.whitespace, self.digits,
                self.contractions, self.specials, self.random_cps, self.mixed, self.mixed]
        return self.r.choice(gens)()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--count', type=int, default=400)
    ap.add_argument('--bytes', type=int, default=0, help='emit one plain-text blob of about N bytes instead')
    a = ap.parse_args()
    g = Gen(a.seed)
    if a.bytes:
        parts, n = [], 0
        while n < a.bytes:
            s = g.one()
            parts.append(s)
            n += len(s.encode('utf-8'))
        import sys
        sys.stdout.write(''.join(parts))
        return
    print(json.dumps([g.one() for _ in range(a.count)], ensure_ascii=False))


if __name__ == '__main__':
    main()
