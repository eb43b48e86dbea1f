#!/usr/bin/env python3
"""`nemotron tokenizer` from the outside: train on a small corpus, encode files into a uint32
stream (one document per file, </s> = 2 after each), decode it back through the tokenizer and get
the input bytes exactly (UTF-8, invalid bytes and special-token strings included)."""
import glob
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from clitest import CliTest  # noqa: E402

T = CliTest(sys.argv[1], "tokenizer cli")
run, check, must = T.run, T.check, T.must
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
VOCAB = 1024

with tempfile.TemporaryDirectory() as d:
    p = lambda *x: os.path.join(d, *x)
    corpus = sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))) + sorted(glob.glob(os.path.join(SRC, "src", "cli", "*.cpp")))
    args = ["tokenizer", "train", "--vocab", str(VOCAB), "--out", p("tok")]
    for c in corpus:
        args += ["--corpus", c]
    r = run(args)
    check("train", r.returncode == 0 and "trained" in r.stderr and f"vocab {VOCAB}" in r.stdout, r.stdout + r.stderr)
    tj = json.load(open(p("tok", "tokenizer.json")))
    check("vocab size", len(tj["model"]["vocab"]) == VOCAB and tj["model"]["vocab"]["</s>"] == 2)
    cfg = json.load(open(p("tok", "tokenizer_config.json")))
    check("config has the Lightning template", "<|im_start|>" in cfg.get("chat_template", "") and
          open(p("tok", "chat_template.jinja")).read() == cfg["chat_template"])

    docs = [
        "Hello, world! The trained family is the default model.\n" * 3 + "def f(x):\n    return x ** 2\n",
        "UTF-8: héllo wörld ✓ 日本語 — emoji 🙂\nliteral specials: </s> <|im_start|>user<|im_end|> <think>\n",
        b"invalid bytes: \xff\xfe\xc3( end".decode("latin-1"),
    ]
    files = []
    for i, text in enumerate(docs):
        files.append(p(f"doc{i}.txt"))
        with open(files[-1], "wb") as f:
            f.write(text.encode("latin-1") if i == 2 else text.encode("utf-8"))
    inputs = b"".join(open(f, "rb").read() for f in files)

    r = run(["tokenizer", "encode", "--tokenizer", p("tok"), "--out", p("ids.u32")] + files)
    check("encode", r.returncode == 0 and "bytes/token" in r.stdout, r.stdout + r.stderr)
    raw = open(p("ids.u32"), "rb").read()
    ids = list(struct.unpack(f"<{len(raw) // 4}I", raw))
    check("ids in the vocabulary", len(raw) % 4 == 0 and all(i < VOCAB for i in ids))
    # Special strings in the text stay text: id 2 appears only as the separator after each document.
    check("one </s> after each document", ids.count(2) == len(files) and ids[-1] == 2, ids)
    check("token count printed", f"{len(ids) - len(files)} tokens" in r.stdout, r.stdout)
    r = run(["tokenizer", "decode", "--tokenizer", p("tok"), "--out", p("back.txt"), p("ids.u32")])
    check("decode", r.returncode == 0, r.stderr)
    check("round trip is the input bytes", open(p("back.txt"), "rb").read() == inputs)

    r = run(["tokenizer", "encode", "--tokenizer", p("tok"), "--out", p("sp.u32"), "--parse-special", files[1]])
    sp = open(p("sp.u32"), "rb").read()
    check("--parse-special maps </s> to its id", r.returncode == 0 and struct.unpack(f"<{len(sp) // 4}I", sp).count(2) == 2)

    # Errors: usage (exit 2) for a missing corpus or a vocabulary below specials + 256; exit 1 naming the file.
    r = run(["tokenizer", "train", "--corpus", p("nope.txt"), "--vocab", "1024", "--out", p("x")])
    check("missing corpus", r.returncode == 2 and "nope.txt" in r.stderr, r.stderr)
    r = run(["tokenizer", "train", "--corpus", files[0], "--vocab", "100", "--out", p("x")])
    check("vocab too small", r.returncode == 2 and "--vocab" in r.stderr, r.stderr)
    T.expect_error("no tokenizer", ["tokenizer", "encode", "--tokenizer", p("none"), "--out", p("y.u32"), files[0]],
                   [os.path.join(p("none"), "tokenizer.json")])
    with open(p("odd.u32"), "wb") as f:
        f.write(b"\x01\x00\x00")
    T.expect_error("truncated stream", ["tokenizer", "decode", "--tokenizer", p("tok"), "--out", p("z"), p("odd.u32")],
                   ["odd.u32: 3 bytes is not a whole number of uint32 ids"])

T.finish()
