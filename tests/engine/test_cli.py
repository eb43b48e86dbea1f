#!/usr/bin/env python3
"""End-to-end checks of the `nemotron` command: the main job works with nothing downloaded, and
bad input gives one clear message and a non-zero exit, never a crash."""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
passed = failed = 0


def run(args, **kw):
    return subprocess.run([BIN] + args, capture_output=True, text=True, errors="replace", timeout=300, **kw)


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def expect_error(name, args, needle):
    r = run(args)
    check(name, r.returncode == 1 and needle in r.stderr and r.stderr.startswith("error: "),
          f"rc={r.returncode} stderr={r.stderr!r}")


with tempfile.TemporaryDirectory() as d:
    # The main job: the embedded default model generates text.
    r = run(["run", "--prompt", "Hello", "--max-tokens", "8", "--stats"])
    check("run embedded model", r.returncode == 0 and "tok/s" in r.stderr, r.stderr)
    # Token ids in, ids out; greedy is deterministic and thread-count independent.
    outs = [run(["run", "--ids", "1,2,3", "-n", "12", "-t", t]).stdout for t in ("1", "2")]
    check("ids deterministic across threads", outs[0] == outs[1] and len(outs[0].split()) == 12, repr(outs))
    # synth + run with speculation: same tokens as without.
    m = os.path.join(d, "a")
    r = run(["synth", "--preset", "tiny-a", "--out", m, "--quiet"])
    check("synth", r.returncode == 0, r.stderr)
    base = run(["run", "-m", m, "--ids", "4,5,6,4,5,6", "-n", "24", "--spec", "none"]).stdout
    # Ids may be separated by commas, spaces or both; empty items are skipped.
    r = run(["run", "-m", m, "--ids", " 4, 5 6,,4 5,6", "-n", "24", "--spec", "none"])
    check("--ids separators", r.returncode == 0 and r.stdout == base and len(base.split()) == 24,
          f"{r.stdout!r} vs {base!r} / {r.stderr}")
    # --no-mmap: the same weights from anonymous memory, the same tokens (dense and ModelOpt shards).
    r = run(["run", "-m", m, "--ids", "4,5,6,4,5,6", "-n", "24", "--spec", "none", "--no-mmap"])
    check("--no-mmap same tokens", r.returncode == 0 and r.stdout == base and len(base.split()) == 24,
          f"{r.stdout!r} vs {base!r} / {r.stderr}")
    mq = os.path.join(d, "q")
    r = run(["synth", "--preset", "tiny-q", "--format", "modelopt", "--out", mq, "--quiet"])
    check("synth modelopt", r.returncode == 0, r.stderr)
    outs = [run(["run", "-m", mq, "--ids", "4,5,6", "-n", "16"] + extra) for extra in ([], ["--no-mmap"])]
    check("--no-mmap same tokens (ModelOpt shards)",
          all(o.returncode == 0 for o in outs) and outs[0].stdout == outs[1].stdout and len(outs[0].stdout.split()) == 16,
          repr([(o.stdout, o.stderr[-200:]) for o in outs]))
    # --arith bf16 on the ModelOpt checkpoint: speculation (MTP) gives the plain bf16 tokens bit for bit;
    # bench reports the arithmetic; a value other than f32/bf16 is a usage error naming the option.
    r = run(["run", "-m", mq, "--ids", "4,5,6", "-n", "16", "--arith", "bf16", "--spec", "mtp", "--vs-plain"])
    check("--arith bf16 mtp lossless", r.returncode == 0 and "bitwise" in r.stderr, r.stdout + r.stderr[-300:])
    r = run(["bench", "-m", mq, "--prompt-tokens", "4", "--gen", "2", "--json", "--arith", "bf16"])
    check("bench --arith bf16", r.returncode == 0 and json.loads(r.stdout).get("arith") == "bf16", r.stderr[-300:])
    r = run(["run", "-m", mq, "--ids", "1", "--arith", "fp16"])
    check("usage error --arith fp16", r.returncode == 2 and "--arith" in r.stderr, f"rc={r.returncode} {r.stderr!r}")
    for spec in ("ngram", "mtp", "auto"):
        r = run(["run", "-m", m, "--ids", "4,5,6,4,5,6", "-n", "24", "--spec", spec, "--draft-max", "4",
                 "--spec-stats"])
        check(f"spec {spec} lossless", r.returncode == 0 and r.stdout == base and "verify calls" in r.stderr,
              f"{r.stdout!r} vs {base!r} / {r.stderr}")
    # DFlash / DSpark drafters (--draft): the same tokens; auto picks the drafter.
    for kind in ("dflash", "dspark"):
        dd = os.path.join(d, kind)
        r = run(["synth", "--preset", "tiny-a", "--drafter", kind, "--out", dd, "--quiet"])
        check(f"synth {kind}", r.returncode == 0, r.stderr)
        r = run(["run", "-m", m, "--draft", dd, "--ids", "4,5,6,4,5,6", "-n", "24", "--spec-stats"])
        check(f"draft {kind} lossless", r.returncode == 0 and r.stdout == base and f"drafter {kind}" in r.stderr,
              f"{r.stdout!r} vs {base!r} / {r.stderr}")
    # Text in and out: synthetic models ship a trained tokenizer.json and the Lightning template.
    check("synth writes tokenizer", all(os.path.exists(os.path.join(m, f)) for f in
                                        ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")))
    r = run(["run", "-m", m, "--prompt", "The capital of France is", "-n", "16"])
    check("run text prompt", r.returncode == 0 and len(r.stdout) > 1, r.stderr)
    r = run(["chat", "-m", m, "--message", "What is 12 times 12?", "-n", "16", "--stats"])
    check("chat one message", r.returncode == 0 and "generated" in r.stderr, r.stderr)
    r = subprocess.run([BIN, "chat", "-m", m, "-n", "8"], input="hello\n/reset\nsecond turn\n/exit\n",
                       capture_output=True, text=True, errors="replace", timeout=300)
    check("chat loop", r.returncode == 0 and r.stdout.count("\n") >= 2, r.stderr)
    b = os.path.join(d, "b")
    run(["synth", "--preset", "tiny-b", "--out", b, "--quiet"])
    bench = run(["bench", "-m", m, "--prompt-tokens", "8", "--gen", "4", "--json", "--spec", "oracle",
                 "--gammas", "2", "--verify-curve", "--reps", "3", "--membw"])
    ok = bench.returncode == 0
    if ok:
        j = json.loads(bench.stdout)
        c = j["verify_curve"]
        # The byte floor: width 1 routes as the decode step did (same token), and a wider pass
        # (the same rows plus more) reads at least the bytes of a narrower one.
        # --reps 3: three paired plain / speculative runs; the speedup is their median.
        sp = j["spec"][0]
        ok = len(sp["speedup_runs"]) == 3 and sp["speedup"] == sorted(sp["speedup_runs"])[1] and \
            j["spec_plain_tok_s"] > 0 and \
            j["spec"][0]["identical_to_plain"] and j["spec"][0]["acceptance_rate"] == 1.0 and \
            j["verify_rounds"] == 3 and len(c) == 8 and c[0]["floor_relative"] == 1.0 and c[0]["bytes"] == j["decode_step_bytes"] and \
            all(c[i]["bytes"] <= c[i + 1]["bytes"] for i in range(7)) and c[7]["bytes"] > c[0]["bytes"] and \
            all(set(e["part_ms"]) == {"mamba", "attention", "moe", "mlp", "norms_embed", "lm_head"} and
                min(e["part_ms"].values()) >= 0 and e["part_ms"]["mamba"] > 0 for e in c)
        # The compute floor: w rows of the per-row multiply-adds at the measured peak; the per-matrix
        # floor (each product at the slower of its bytes and its arithmetic) is above both floors.
        pk = j["dot_peak"]
        ok = ok and pk["macs_per_s"] > 0 and pk["instruction"] and pk["matmul_macs_per_row"] > 0 and \
            all(e["macs"] == e["width"] * pk["matmul_macs_per_row"] for e in c) and \
            all(abs(e["compute_floor_relative"] - e["width"] * c[0]["compute_floor_relative"]) <=
                1e-9 * e["compute_floor_relative"] for e in c) and \
            all(e["matrix_floor_relative"] >= max(e["floor_relative"], e["compute_floor_relative"]) * (1 - 1e-9)
                for e in c)
        # The per-matrix floor by part: the profile's parts, each >= 0, and together the whole
        # floor (in ms: relative x the decode step, which is seconds / relative).
        ok = ok and all(set(e["part_matrix_floor_ms"]) == set(e["part_ms"]) and
                        min(e["part_matrix_floor_ms"].values()) >= 0 and
                        e["part_matrix_floor_ms"]["mamba"] > 0 and e["part_matrix_floor_ms"]["lm_head"] > 0 and
                        abs(sum(e["part_matrix_floor_ms"].values()) -
                            e["matrix_floor_relative"] * e["seconds"] / e["relative"] * 1e3) <=
                        1e-9 * sum(e["part_matrix_floor_ms"].values()) for e in c)
        # --membw: a probe before each of the 3 repetitions and one after the last; the headline
        # bandwidth is their best, and each repetition is held against the two probes around it.
        p, rp = j["read_bandwidth_probes_gb_s"], j["roofline_fraction_paired"]
        ok = ok and len(p) == 4 and min(p) > 0 and j["read_bandwidth_gb_s"] == max(p) and \
            len(rp["runs"]) == 3 and rp["min"] == min(rp["runs"]) and rp["max"] == max(rp["runs"]) and \
            rp["median"] == sorted(rp["runs"])[1] and len(j["decode_runs_s"]) == 3 and \
            all(abs(rp["runs"][i] - 4 / j["decode_runs_s"][i] * j["decode_gb_per_token"] / ((p[i] + p[i + 1]) / 2))
                <= 1e-9 * rp["runs"][i] for i in range(3)) and \
            abs(j["roofline_fraction"] - j["decode_tok_s"] * j["decode_gb_per_token"] / max(p)) <= 1e-9
    check("bench json", ok, bench.stdout[-500:] + bench.stderr)

    # Bad input: one clear message, exit 1.
    expect_error("missing model dir", ["run", "-m", os.path.join(d, "nope"), "--ids", "1"], "config.json: cannot open")
    expect_error("bad id", ["run", "-m", m, "--ids", "1,x"], "'x' is not a token id")
    expect_error("id out of vocab", ["run", "-m", m, "--ids", "512"], "outside the vocabulary")
    expect_error("mtp without mtp", ["run", "-m", b, "--spec", "mtp", "--ids", "1"], "needs a checkpoint with an MTP")
    # Numeric options: out of range or not finite is a usage error (exit 2) naming the option and range.
    for args, needle in ((["--draft-max", "16"], "--draft-max: 16 is outside [0, 15]"),
                         (["-n", "0"], "--max-tokens: 0 is outside [1, "), (["-n", "-5"], "--max-tokens: -5 is outside"),
                         (["--temp", "nan"], "--temp: 'nan' is not a finite number"),
                         (["--top-p", "5"], "--top-p: 5 is outside [0, 1]"), (["--top-k", "-4"], "--top-k: -4 is outside"),
                         (["-t", "-3"], "--threads: -3 is outside [0, 1024]")):
        r = run(["run", "-m", m, "--ids", "1"] + args)
        check(f"usage error {args}", r.returncode == 2 and needle in r.stderr, f"rc={r.returncode} {r.stderr!r}")
    # Comma lists of bench: each item an integer in range, refused before any timing runs.
    for args, needle in ((["--spec", "oracle", "--gammas", "1,x"], "--gammas: 'x' is not an integer in [1, 15]"),
                         (["--spec", "oracle", "--gammas", "2,0"], "--gammas: '0' is not an integer in [1, 15]"),
                         (["--concurrency", "1,999"], "--concurrency: '999' is not an integer in [1, 256]")):
        r = run(["bench", "-m", m] + args)
        check(f"usage error bench {args}", r.returncode == 2 and needle in r.stderr and not r.stdout,
              f"rc={r.returncode} {r.stderr!r}")
    expect_error("unknown spec", ["run", "-m", m, "--spec", "eagle", "--ids", "1"], "--spec 'eagle'")
    expect_error("drafter/target mismatch", ["run", "-m", b, "--draft", os.path.join(d, "dflash"), "--ids", "1"],
                 "does not match the target's")
    expect_error("drafter wrong mode", ["run", "-m", m, "--draft", os.path.join(d, "dflash"), "--spec", "dspark",
                                         "--ids", "1"], "is a dflash drafter")
    expect_error("drafter mode without drafter", ["run", "-m", m, "--spec", "dflash", "--ids", "1"],
                 "needs a drafter: --draft DIR")
    nt = os.path.join(d, "nt")
    run(["synth", "--preset", "tiny-a", "--out", nt, "--quiet"])
    os.remove(os.path.join(nt, "tokenizer.json"))
    expect_error("chat without tokenizer", ["chat", "-m", nt, "--message", "hi"], "chat needs tokenizer.json")
    expect_error("unknown preset", ["synth", "--preset", "x", "--out", os.path.join(d, "x")], "unknown preset")
    # A truncated shard names the file.
    bad = os.path.join(d, "bad")
    run(["synth", "--preset", "tiny-a", "--out", bad, "--quiet"])
    st = os.path.join(bad, "model.safetensors")
    size = os.path.getsize(st)
    with open(st, "r+b") as f:
        f.truncate(size // 2)
    expect_error("truncated shard", ["run", "-m", bad, "--ids", "1"], "model.safetensors")
    with open(os.path.join(bad, "config.json"), "w") as f:
        f.write('{"model_type": "nemotron_h", "hidden_size": 64')
    expect_error("malformed config", ["run", "-m", bad, "--ids", "1"], "config.json: malformed JSON")

print(f"cli: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
