#!/usr/bin/python3
"""Weights are mapped, not copied, and only what a run reads is paged in - on a full-width ModelOpt checkpoint with
a MoE layer (NVFP4 experts, FP8 Mamba projections, bf16 rest).

    check_rss_moe.py path/to/nemotron [WORKDIR] [--checkpoint-pages-only]

Writes `nemotron synth --preset lightning --pattern ME --format modelopt --no-mtp --vocab 16384 --experts 32` (full
Lightning widths: hidden 2688, expert FFN 1856, Mamba 64x64 heads; fewer experts and a smaller vocabulary to keep it
~340 MB), runs `nemotron bench --json` for a short generation (few rows, so most experts stay unrouted), and checks
the resident memory after it in two parts, from /proc/self/smaps as the engine reports it:

1. The checkpoint's resident pages (file-backed) <= the pages of the tensors the run needed: every tensor but the
   routed experts, plus the experts the engine reports it routed to (bench `experts_used`), each tensor widened by
   what one fault may map (the enclosing 2 MiB-aligned page-cache folios, +- the 64 KiB fault-around window); the
   embedding only for the rows of the tokens fed. Touching the experts no row was routed to (a prefetch, a
   MADV_WILLNEED over the file, a load-time scan) exceeds it.
2. The anonymous resident memory (RssAnon: heap, stacks; a copied weight lands there) grows from before the load
   by at most the small tensors the engine widens to f32 (norms, conv, dt_bias, A_log, D, router bias) + the
   sequence state + SCRATCH_MB (the activations and bookkeeping a run keeps, measured). The check asserts that its
   slack (bound - growth) is below the smallest tensor of 1 MiB or more (one NVFP4 expert matrix, 2.5 MB), so a
   copy of any large weight exceeds it. File-backed pages other than the checkpoint (the program's and its
   libraries' code, paged in as the run reaches it) are not part of it: they varied by ~0.5 MB from run to run
   and made the earlier bound (RSS - checkpoint pages) fail now and then.

--checkpoint-pages-only checks part 1 alone: for a sanitizer build, whose shadow memory and allocator quarantine
are anonymous RSS that part 2's bound cannot allow for (ASan + UBSan: 123.4 MB of other RSS > 91.1 MB), while the file-backed
checkpoint pages are measured as exactly as in a release build (ASan: 204.9 MB <= 212.0 MB, ~25 s on 2 cores; shown
failing there: a load-time read of every expert page made them 263.0 MB > 212.0 MB).

Measured (AVX-512 machine, kernel 6.18, ext4): 20 of 32 experts routed; checkpoint pages 204.9 MB <= 212.0 MB (file
342.7 MB); reading every expert's up_proj pages at load made them 234.0 MB > 212.0 MB. Anonymous memory (Intel
Xeon, 2026-12-06, six runs): grew 1.38-2.03 MB <= 2.84 MB (state 2.2 + small tensors as f32 0.2 + scratch 0.5;
slack 0.9-1.5 MB < 2.49 MB); RSS - checkpoint pages, the earlier measure, read 12.7-13.9 MB against a 13.6-13.7
MB bound in the same hour.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

PAGE = 4096
# A fault maps the whole page-cache folio it hits (ext4/xfs use large folios, mapped by 2 MiB PMDs: smaps
# FilePmdMapped) plus up to fault_around_bytes (64 KiB) of neighbours. Folios are aligned in the file and at most
# 2 MiB, so a page is resident only if its 2 MiB-aligned block (+- 64 KiB) holds a byte the run read.
FOLIO = 2 << 20
FAULT_AROUND = 64 * 1024
LARGE = 1 << 20
# Measured: besides the small tensors as f32 and the sequence state (2.4 MB, not all of it touched by a short run),
# a run's anonymous memory grows by activation buffers, the tensor index and a worker thread's stack and arena:
# 1.4-2.0 MB in all; allowed 0.5 MB beyond the two.
SCRATCH_MB = 0.5


def tensors_of(model_dir):
    """{file: [(name, start, end)]} with absolute file offsets of every tensor's bytes."""
    out = {}
    for f in sorted(os.listdir(model_dir)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, f)
        with open(path, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        base = 8 + n
        out[path] = [(k, base + v["data_offsets"][0], base + v["data_offsets"][1], v)
                     for k, v in header.items() if k != "__metadata__"]
    return out


def expert_of(name):
    """(layer, expert) of a routed expert's tensor (weight, scales), else None."""
    parts = name.split(".")
    if "experts" in parts and parts[0] == "backbone":
        i = parts.index("experts")
        return int(parts[2]), int(parts[i + 1])
    return None


def widen(s, e):
    """The bytes a fault anywhere in [s, e) may map: the enclosing 2 MiB-aligned blocks, +- fault-around."""
    return s // FOLIO * FOLIO - FAULT_AROUND, -(-e // FOLIO) * FOLIO + FAULT_AROUND


def page_span(intervals, size):
    """Bytes of the pages covering the union of [start, end) intervals, clipped to [0, size)."""
    iv = sorted((max(0, s // PAGE * PAGE), min(size, -(-e // PAGE) * PAGE)) for s, e in intervals)
    total, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def main():
    ap = argparse.ArgumentParser(description="weights are mapped, not copied; only what a run reads is paged in")
    ap.add_argument("nemotron")
    ap.add_argument("workdir", nargs="?", help="where the checkpoint is written (default: a temporary directory)")
    ap.add_argument("--checkpoint-pages-only", action="store_true",
                    help="check the resident checkpoint pages alone (sanitizer builds: see above)")
    args = ap.parse_args()
    if args.workdir is None:
        with tempfile.TemporaryDirectory() as work:
            return check(args.nemotron, work, args.checkpoint_pages_only)
    return check(args.nemotron, args.workdir, args.checkpoint_pages_only)


def check(nemotron, work, pages_only):
    d = os.path.join(work, "moe")
    subprocess.run([nemotron, "synth", "--preset", "lightning", "--pattern", "ME", "--no-mtp", "--format", "modelopt",
                    "--vocab", "16384", "--experts", "32", "--out", d, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    prompt, gen = 2, 2
    # glibc's default allocator policy: the engine's (base/memory.h tune_allocator) keeps freed scratch
    # buffers resident, which would count here as "other" memory without saying anything about copied weights.
    env = dict(os.environ, NEMOTRON_SYSTEM_MALLOC="1")
    b = json.loads(subprocess.run([nemotron, "bench", "--model", d, "--prompt-tokens", str(prompt), "--gen", str(gen),
                                   "--threads", "2", "--cold", "--json"], check=True, stdout=subprocess.PIPE,
                                  env=env).stdout)
    used = {(int(l), int(e)) for l, es in b["experts_used"].items() for e in es}
    files = tensors_of(d)
    n_experts = len({expert_of(n) for ts in files.values() for n, *_ in ts if expert_of(n)})
    need_file = 0
    small_f32 = 0
    smallest_large = None
    for path, ts in files.items():
        size = os.path.getsize(path)
        need = [widen(0, 8 + PAGE)]                 # the header
        for name, s, e, info in ts:
            ex = expert_of(name)
            if name == "backbone.embeddings.weight":    # only the rows of the tokens fed: at most prompt + gen
                need_file += min(page_span([widen(s, e)], size), (prompt + gen) * (FOLIO + 2 * FAULT_AROUND))
            elif ex is None or ex in used:
                need.append(widen(s, e))
            nbytes = e - s
            numel = 1
            for x in info["shape"]:
                numel *= x
            if len(info["shape"]) <= 1 or name.endswith("conv1d.weight"):
                small_f32 += 4 * numel              # norms, conv, dt_bias, A_log, D, router bias: widened to f32
            if nbytes >= LARGE and (smallest_large is None or nbytes < smallest_large[0]):
                smallest_large = (nbytes, name)
        need_file += page_span(need, size)
    file_bytes = sum(os.path.getsize(p) for p in files)
    rss = b["rss_mb"] * 1e6
    ckpt = b["rss_checkpoint_mb"] * 1e6
    anon_growth = (b["rss_anon_mb"] - b["rss_anon_before_load_mb"]) * 1e6
    anon_bound = small_f32 + b["state_mb"] * 1e6 + SCRATCH_MB * 1e6
    try:
        thp_always = "[always]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        thp_always = False
    if thp_always:   # anonymous buffers may each be rounded up to a 2 MiB huge page: only f32 copies stay visible
        anon_bound += 4 * FOLIO
        print("(transparent huge pages 'always': 8 MiB more allowed for anonymous memory)")
    print(f"checkpoint {file_bytes / 1e6:.1f} MB; {len(used)} of {n_experts} experts routed; smallest large tensor "
          f"{smallest_large[1]} {smallest_large[0] / 1e6:.2f} MB")
    print(f"checkpoint pages resident {ckpt / 1e6:.1f} MB <= needed {need_file / 1e6:.1f} MB "
          f"(tensors read + fault-around)")
    print(f"anonymous memory grew {anon_growth / 1e6:.2f} MB{' (not checked)' if pages_only else ''} <= "
          f"{anon_bound / 1e6:.2f} MB (small tensors as f32 {small_f32 / 1e6:.1f} + state {b['state_mb']:.1f} + "
          f"scratch {SCRATCH_MB}); slack {(anon_bound - anon_growth) / 1e6:.2f} MB "
          f"(RSS - checkpoint pages {(rss - ckpt) / 1e6:.1f} MB, not checked)")
    failed = 0
    if b["decode_tok_s"] <= 0:
        print("FAIL: no decode happened")
        failed += 1
    if not used or len(used) >= n_experts:
        print(f"FAIL: {len(used)} of {n_experts} experts routed: the check needs some routed and some not")
        failed += 1
    if ckpt <= 0:
        print("FAIL: no resident checkpoint pages reported (smaps unreadable?)")
        failed += 1
    if ckpt > need_file:
        print("FAIL: more checkpoint pages resident than the tensors the run read")
        failed += 1
    if pages_only:
        print("--checkpoint-pages-only: the bound on the other resident memory is not checked")
    else:
        if b["rss_anon_mb"] <= 0:
            print("FAIL: no anonymous resident memory reported (/proc/self/status unreadable?)")
            failed += 1
        if anon_growth > anon_bound:
            print("FAIL: anonymous resident memory grew beyond its bound: a weight is copied?")
            failed += 1
        elif not thp_always and anon_bound - anon_growth >= smallest_large[0]:
            print("FAIL: the bound's slack is not below the smallest large tensor: a copy of it could pass unseen")
            failed += 1
    print(f"rss moe check: {0 if failed else 1} passed, {1 if failed else 0} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
