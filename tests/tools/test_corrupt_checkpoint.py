#!/usr/bin/env python3
"""Corrupt-checkpoint matrix: synthetic checkpoints (dense bf16 single file, ModelOpt NVFP4 + FP8
shards with an index, MLX affine 4-bit) and corrupted copies of them: truncation at every section
boundary (header length, header, each tensor's data start and end), flipped header bytes, a
wrong dtype and a wrong shape for one tensor of every kind, NaN / Inf / zero scales, missing
shards, an index naming a missing file or the wrong shard, duplicate tensor names. Each gives
exit 1 and one `error:` line naming the file and the tensor where there is one, from `inspect`
(headers and configs) and from loading through `run` (values too); never a crash (the ASan
stage runs this test against the sanitizer build)."""
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from clitest import CliTest  # noqa: E402
from safetensors_file import header, read as read_st, write as write_st  # noqa: E402

T = CliTest(sys.argv[1], "corrupt checkpoint")
RUN = ["--ids", "1,2", "-n", "1", "-t", "1"]


def kind(name):
    """A tensor's kind: its name with layer and expert numbers replaced."""
    return re.sub(r"\.\d+\.", ".N.", name)


class Case:
    """A fresh copy of a base checkpoint to corrupt; checks both commands on it."""

    def __init__(self, base, work):
        self.dir = os.path.join(work, "case")
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.copytree(base, self.dir)

    def path(self, f):
        return os.path.join(self.dir, f)

    def expect(self, name, needles, commands=("inspect", "run"), inspect_args=()):
        """Exit 1 with one error line holding every needle ({dir} stands for the copy)."""
        needles = [n.replace("{dir}", self.dir) for n in needles]
        for c in commands:
            args = ["inspect", self.dir, *inspect_args] if c == "inspect" else ["run", "-m", self.dir] + RUN
            T.expect_error(f"{name} [{c}]", args, needles)


def synth(work, name, *args):
    d = os.path.join(work, name)
    T.must(["synth", "--out", d, "--quiet"] + list(args))
    return d


def truncations(base, work):
    """Cut model.safetensors at every section boundary; the error names the tensor at the cut."""
    f = os.path.join(base, "model.safetensors")
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    ts, _ = read_st(f)
    cuts = [(0, []), (4, []), (8, []), (8 + n // 2, []), (8 + n, [ts[0][0]])]
    off = 8 + n
    for name, _, _, data in ts:
        if data:  # cut at the tensor's data start (+1) and one byte before its end
            cuts += [(off + 1, [name]), (off + len(data) - 1, [name])]
        off += len(data)
    for i, (cut, names) in enumerate(cuts):
        c = Case(base, work)
        with open(c.path("model.safetensors"), "wb") as out:
            out.write(raw[:cut])
        # inspect reads every header; `run` loads the same way (sampled, to keep the ASan stage short).
        cmds = ("inspect", "run") if i < 5 or i % 16 == 0 else ("inspect",)
        c.expect(f"truncated at {cut}", ["{dir}/model.safetensors"] + names, cmds)


def header_flips(base, work):
    """Flip bytes of the header length and of the JSON header: exit 0 (a harmless flip, e.g. in
    whitespace that stays whitespace) or a clean error; never a crash."""
    f = os.path.join(base, "model.safetensors")
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    names = [t[0] for t in read_st(f)[0]]
    positions = list(range(8)) + [8 + n * k // 40 for k in range(40)]
    errors = 0
    for i, pos in enumerate(positions):
        for mask in (0x01, 0x20):
            c = Case(base, work)
            b = bytearray(raw)
            b[pos] ^= mask
            open(c.path("model.safetensors"), "wb").write(b)
            for cmd in ("inspect", "run") if i % 8 == 0 else ("inspect",):
                args = ["inspect", c.dir] if cmd == "inspect" else ["run", "-m", c.dir] + RUN
                r = T.run(args)
                errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
                named = any(c.path("model.safetensors") in e or c.dir in e and any(x in e for x in names)
                            or "missing tensor" in e for e in errs)
                ok = r.returncode == 0 or (r.returncode == 1 and len(errs) == 1 and named)
                T.check(f"header byte {pos} ^ {mask:#x} [{cmd}]", ok, f"rc={r.returncode} stderr={r.stderr!r}")
                errors += r.returncode == 1
    T.check("header flips are mostly caught", errors >= len(positions), f"{errors} errors")


def retype(base, work, file, pick, new_dtype=None, new_shape=None, needle=None, commands=("inspect", "run")):
    """One tensor (pick(name) true, first in file order) with another dtype or shape, same bytes."""
    c = Case(base, work)
    ts, meta = read_st(c.path(file))
    t = next(t for t in ts if pick(t[0]))
    old = (t[1], list(t[2]))
    if new_dtype:
        t[1] = new_dtype
    if new_shape:
        t[2] = new_shape(t[2])
    write_st(c.path(file), ts, meta)
    what = f"{t[0]} {old[0]}{old[1]} -> {t[1]}{t[2]}"
    # A broken MTP tensor fails `inspect` with --require-mtp (else an incomplete MTP is a warning).
    c.expect(what, ["{dir}/" + file, needle or t[0]], commands, ["--require-mtp"] if t[0].startswith("mtp.") else [])


def wrong_dtypes_and_shapes(dense, work):
    ts, _ = read_st(os.path.join(dense, "model.safetensors"))
    kinds = {}
    for name, dtype, shape, _ in ts:
        kinds.setdefault(kind(name), (name, dtype, shape))
    other = {"BF16": "I16", "F32": "I32", "F16": "U16"}
    for k, (name, dtype, shape) in sorted(kinds.items()):
        # A module's weight is reported by its module name (the prefix), others by the tensor name.
        needle = name[:-len(".weight")] if name.endswith(".weight") else name
        retype(dense, work, "model.safetensors", lambda n, name=name: n == name, new_dtype=other[dtype],
               needle=needle)
        # The same elements in a shape no loader accepts: flattened, or a vector folded in two.
        flat = [math.prod(shape)] if len(shape) >= 2 else [shape[0] // 2, 2]
        retype(dense, work, "model.safetensors", lambda n, name=name: n == name, new_shape=lambda _, f=flat: f,
               needle=needle)
    T.check("every tensor kind covered", len(kinds) >= 20, f"{len(kinds)} kinds")


def shard_of(d, tensor):
    return json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"][tensor]


def set_value(c, tensor, offset, data):
    """Overwrite bytes of `tensor`'s data in its shard."""
    f = c.path(shard_of(c.dir, tensor))
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    b = json.loads(raw[8:8 + n])[tensor]["data_offsets"][0]
    with open(f, "r+b") as out:
        out.seek(8 + n + b + offset)
        out.write(data)
    return os.path.basename(f)


def quantized(q, work):
    """ModelOpt NVFP4 + FP8: wrong dtypes/shapes of quantized tensors and bad scale values."""
    wm = json.load(open(os.path.join(q, "model.safetensors.index.json")))["weight_map"]
    nv = next(k[:-len(".weight")] for k in wm if k.endswith(".experts.0.up_proj.weight"))
    fp8 = next(k[:-len(".weight")] for k in wm if k.endswith("mixer.in_proj.weight") and k + "_scale" in wm)
    for tensor, dtype, shape in [(nv + ".weight", "I8", None), (nv + ".weight_scale", "U8", None),
                                 (nv + ".weight_scale", None, lambda s: s[::-1]), (nv + ".weight_scale_2", "I32", None),
                                 (fp8 + ".weight", "F8_E5M2", None), (fp8 + ".weight_scale", "I32", None),
                                 (fp8 + ".weight", None, lambda s: s[::-1])]:
        retype(q, work, shard_of(q, tensor), lambda n, t=tensor: n == t, dtype, shape, needle=tensor.rsplit(".", 1)[0])
    nan, inf = struct.pack("<f", float("nan")), struct.pack("<f", float("inf"))
    scalars = [nv + ".weight_scale_2", fp8 + ".weight_scale"] + [k for k in wm if k.endswith("input_scale")][:1]
    for tensor in scalars:
        for label, v in (("NaN", nan), ("Inf", inf), ("zero", struct.pack("<f", 0.0)), ("negative", struct.pack("<f", -1.0))):
            c = Case(q, work)
            f = set_value(c, tensor, 0, v)
            c.expect(f"{tensor} = {label}", ["{dir}/" + f, tensor.rsplit(".", 1)[0], tensor.rsplit(".", 1)[1]], ("run",))
    c = Case(q, work)  # an E4M3 NaN code among the NVFP4 block scales
    f = set_value(c, nv + ".weight_scale", 3, b"\x7f")
    c.expect("NVFP4 block scale NaN", ["{dir}/" + f, nv, "weight_scale", "NaN"], ("run",))
    c = Case(q, work)  # an FP8 weight NaN code
    f = set_value(c, fp8 + ".weight", 5, b"\xff")
    c.expect("FP8 weight NaN", ["{dir}/" + f, fp8, "NaN"], ("run",))


def mlx(m, work):
    """MLX affine: wrong dtypes of packed weights / scales; non-finite scales and biases."""
    f = "model.safetensors"
    ts, _ = read_st(os.path.join(m, f))
    mod = next(t[0][:-len(".scales")] for t in ts if t[0].endswith("mixer.in_proj.scales"))
    sdt = next(t[1] for t in ts if t[0] == mod + ".scales")
    retype(m, work, f, lambda n: n == mod + ".weight", "I32", needle=mod)
    retype(m, work, f, lambda n: n == mod + ".scales", {"BF16": "I16", "F16": "I16", "F32": "I32"}[sdt], needle=mod)
    retype(m, work, f, lambda n: n == mod + ".biases", None, lambda s: s[::-1], needle=mod)
    bad = {"F16": (b"\x00\x7e", b"\x00\x7c"), "BF16": (b"\xc0\x7f", b"\x80\x7f"),
           "F32": (struct.pack("<f", float("nan")), struct.pack("<f", float("inf")))}[sdt]
    for part in ("scales", "biases"):
        for label, v in zip(("NaN", "Inf"), bad):
            c = Case(m, work)
            raw = bytearray(open(c.path(f), "rb").read())
            n = struct.unpack("<Q", raw[:8])[0]
            b = json.loads(raw[8:8 + n])[f"{mod}.{part}"]["data_offsets"][0]
            raw[8 + n + b + 2 * len(v): 8 + n + b + 3 * len(v)] = v
            open(c.path(f), "wb").write(raw)
            c.expect(f"MLX {part} {label}", ["{dir}/" + f, mod, "." + part], ("run",))


def shards_and_index(q, work):
    idx = "model.safetensors.index.json"
    j = json.load(open(os.path.join(q, idx)))
    wm = j["weight_map"]
    files = sorted(set(wm.values()))
    victim = files[1]
    first = next(k for k, v in sorted(wm.items()) if v == victim)
    c = Case(q, work)
    os.remove(c.path(victim))
    c.expect("missing shard", [victim, first])

    c = Case(q, work)  # the index names a file that does not exist
    t = sorted(wm)[0]
    j2 = json.loads(json.dumps(j))
    j2["weight_map"][t] = "model-00099-of-00099.safetensors"
    json.dump(j2, open(c.path(idx), "w"))
    c.expect("index names a missing file", ["model-00099-of-00099.safetensors", t])

    c = Case(q, work)  # the index sends a tensor to a shard that does not hold it
    other = next(f for f in files if f != wm[t])
    j2 = json.loads(json.dumps(j))
    j2["weight_map"][t] = other
    json.dump(j2, open(c.path(idx), "w"))
    c.expect("index names the wrong shard", ["{dir}/" + other, t])

    c = Case(q, work)  # the index lists a tensor twice (JSON duplicate key)
    text = open(c.path(idx)).read()
    dup = f'"{t}": "{other}", '
    open(c.path(idx), "w").write(text.replace('"weight_map": {', '"weight_map": {' + dup, 1))
    c.expect("index lists a tensor twice", ["{dir}/" + idx, t, "twice"])

    c = Case(q, work)  # a truncated index
    open(c.path(idx), "w").write(text[:len(text) // 2])
    c.expect("truncated index", ["{dir}/" + idx])

    c = Case(q, work)  # two shards hold the same tensor
    ts, meta = read_st(c.path(other))
    src, _ = read_st(c.path(wm[t]))
    ts.append(next(x for x in src if x[0] == t))
    write_st(c.path(other), ts, meta)
    c.expect("tensor in two shards", [t, wm[t], other])


def duplicates_in_header(dense, work):
    c = Case(dense, work)
    f = c.path("model.safetensors")
    ts, meta = read_st(f)
    # The first tensor listed twice with the same entry: JSON parsers keep one silently.
    h = header(ts, meta)
    first = json.dumps(ts[0][0])
    entry = h[h.index(first):h.index("}", h.index(first)) + 1]
    write_st(f, ts, meta, header_text="{" + entry + "," + h[1:])
    c.expect("duplicate tensor in a header", ["{dir}/model.safetensors", ts[0][0], "twice"])


with tempfile.TemporaryDirectory() as work:
    dense = synth(work, "dense", "--preset", "tiny-a")
    q = synth(work, "modelopt", "--preset", "tiny-q", "--format", "modelopt")
    m = synth(work, "mlx4", "--preset", "tiny-q", "--format", "mlx4")
    for d in (dense, q, m):  # the bases themselves are sound
        T.check(f"{os.path.basename(d)} inspects", T.run(["inspect", d]).returncode == 0)
        T.check(f"{os.path.basename(d)} runs", T.run(["run", "-m", d] + RUN).returncode == 0)
    truncations(dense, work)
    header_flips(dense, work)
    wrong_dtypes_and_shapes(dense, work)
    quantized(q, work)
    mlx(m, work)
    shards_and_index(q, work)
    duplicates_in_header(dense, work)
T.finish()
