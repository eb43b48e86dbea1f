"""The `report` stage of tools/train/train.py: measures the exported family with the C++ engine and writes
report.json and plot.png into --work (docs/MODELS.md quotes them).

  * held-out perplexity of each exported target (ModelOpt, dense bf16) from `nemotron dump` logits, next to the
    f32 PyTorch model's from the training log;
  * acceptance length and speed vs gamma for MTP, DFlash and DSpark (`nemotron bench --spec ... --prompt-file`),
    greedy, on held-out prompts;
  * three sample continuations.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np

SAMPLE_PROMPTS = ["def ", "class Parser:\n    def __init__(self", "import os\nimport sys\n\n"]


def sh(cmd, **kw):
    print("$", " ".join(cmd[:10]) + (" ..." if len(cmd) > 10 else ""), flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def heldout_windows(work, n, T, seed=7):
    ids = np.fromfile(os.path.join(work, "heldout.u32"), dtype="<u4").astype(np.int64)
    rng = np.random.default_rng(seed)
    return [ids[s:s + T + 1] for s in rng.integers(0, len(ids) - T - 1, size=n)]


def engine_ce(nemotron, model, windows, work):
    """Mean next-token cross-entropy (nats) of the engine's prefill logits over the windows."""
    tot, cnt = 0.0, 0
    for k, w in enumerate(windows):
        prefix = os.path.join(work, f"ppl_{k}")
        sh([nemotron, "dump", "--model", model, "--ids", ",".join(map(str, w[:-1])), "--gen", "1", "--out", prefix,
            "-t", "2"])
        meta = json.load(open(prefix + ".json"))
        V = meta["vocab"]
        lg = np.fromfile(prefix + ".f32", dtype="<f4").reshape(-1, V)[:len(w) - 1].astype(np.float64)
        m = lg.max(-1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(lg - m).sum(-1)))
        tot += float((lse - lg[np.arange(len(w) - 1), w[1:]]).sum())
        cnt += len(w) - 1
    return tot / cnt


def reference_ce(work, windows):
    """The same cross-entropy from the f32 PyTorch reference on the trained f32 weights (before export)."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    import nemotron_ref as nref
    d = os.path.join(work, "target-f32")
    m = nref.NemotronH(json.load(open(os.path.join(d, "config.json"))),
                       nref.read_safetensors(os.path.join(d, "model.safetensors")))
    m.scan_chunk = 64
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for w in windows:
            lg = m.forward(w[:-1].tolist(), m.new_state())
            tot += torch.nn.functional.cross_entropy(lg, torch.from_numpy(w[1:]), reduction="sum").item()
            cnt += len(w) - 1
    return tot / cnt


def prompt_files(work, n, chars=600):
    """n held-out prompts: `chars` characters (whole lines) of held-out files, from the first function definition
    past a third of the file (code, not the license header), one per file."""
    c = json.load(open(os.path.join(work, "corpus.json")))
    out = []
    for f in c["heldout"]:
        text = open(f, encoding="utf-8", errors="replace").read()
        at = text.find("\n    def ", len(text) // 3)
        if at < 0:
            at = text.find("\ndef ", len(text) // 3)
        if at < 0 or len(text) - at < 2 * chars:
            continue
        cut = text[at + 1:at + 1 + chars]
        cut = cut[:cut.rfind("\n") + 1] or cut
        p = os.path.join(work, f"prompt_{len(out)}.txt")
        open(p, "w").write(cut)
        out.append(p)
        if len(out) == n:
            break
    return out


def run(a, logj):
    nem, work, out = a.nemotron, a.work, a.out
    fam = os.path.join(out, "tiny-code")
    rep = {}
    T = 128 if a.smoke else 256
    wins = heldout_windows(work, 2 if a.smoke else 16, T)
    hist = logj.get("target", [])
    evals = [r for r in hist if "heldout_ce" in r]
    if evals:
        rep["heldout_ce_f32_training_eval"] = evals[-1]["heldout_ce"]   # its own windows
    rep["heldout_ce_f32_reference"] = reference_ce(work, wins)            # the report's windows
    print(f"held-out CE f32 reference: {rep['heldout_ce_f32_reference']:.3f}", flush=True)
    for name in ("tiny-code", "tiny-code-bf16"):
        ce = engine_ce(nem, os.path.join(out, name), wins, work)
        rep[f"heldout_ce_{name}"] = ce
        print(f"held-out CE {name}: {ce:.3f} nats/token, perplexity {math.exp(ce):.2f}", flush=True)
    # acceptance and speed vs gamma, greedy, on held-out prompts
    prompts = prompt_files(work, 2 if a.smoke else 8)
    gammas = "1,3" if a.smoke else "1,2,3,4,5,6,7"
    gen = "16" if a.smoke else "96"
    spec = {}
    for kind, extra in (("mtp", []), ("dflash", ["--draft", fam + "-dflash"]), ("dspark", ["--draft", fam + "-dspark"])):
        cmd = [nem, "bench", "--model", fam, "--spec", "mtp" if kind == "mtp" else "draft", "--gammas", gammas,
               "--gen", gen, "--prompt-tokens", "256", "--json", "-t", str(a.threads)] + extra
        for p in prompts:
            cmd += ["--prompt-file", p]
        j = json.loads(sh(cmd).stdout)
        spec[kind] = [{k: r[k] for k in ("gamma", "mean_accept_length", "acceptance_rate", "speedup", "tok_s",
                                         "identical_to_plain")} for r in j["spec"]]
        spec["plain_tok_s"] = j["spec_plain_tok_s"]
        for r in spec[kind]:
            print(f"{kind} gamma {r['gamma']}: accept length {r['mean_accept_length']:.2f}, "
                  f"speedup {r['speedup']:.2f}x", flush=True)
    rep["spec"] = spec
    rep["samples"] = []
    for p in SAMPLE_PROMPTS:
        r = sh([nem, "run", "--model", fam, "--prompt", p, "-n", "24" if a.smoke else "64", "--spec", "none"])
        rep["samples"].append({"prompt": p, "output": r.stdout})
    json.dump(rep, open(os.path.join(work, "report.json"), "w"), indent=1)
    plot(logj, rep, os.path.join(work, "plot.png"))


def plot(logj, rep, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("python3-matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    tg = logj.get("target", [])
    if tg:
        ax[0].plot([r["step"] for r in tg], [r["train_ce"] for r in tg], lw=0.8, label="target train CE")
        ax[0].plot([r["step"] for r in tg], [r["train_mtp_ce"] for r in tg], lw=0.8, label="MTP train CE (joint)")
        ev = [r for r in tg if "heldout_ce" in r]
        ax[0].plot([r["step"] for r in ev], [r["heldout_ce"] for r in ev], "o-", ms=3, label="target held-out CE")
    for k in ("mtp", "dflash", "dspark"):
        h = logj.get(k, [])
        if h:
            ax[0].plot([r["step"] for r in h], [r["loss"] for r in h], lw=0.8,
                       label=f"{'MTP distill' if k == 'mtp' else k} CE vs the target's greedy token (own steps)")
    ax[0].set_xlabel("optimizer step")
    ax[0].set_ylabel("nats / token")
    ax[0].set_ylim(0, 8)
    ax[0].legend(fontsize=7)
    ax[0].set_title("training loss")
    for k in ("mtp", "dflash", "dspark"):
        rs = rep.get("spec", {}).get(k, [])
        if rs:
            ax[1].plot([r["gamma"] for r in rs], [r["mean_accept_length"] for r in rs], "o-", label=f"{k} accept length")
            ax[1].plot([r["gamma"] for r in rs], [r["speedup"] for r in rs], "x--", label=f"{k} speedup vs plain")
    ax[1].axhline(1.0, color="grey", lw=0.5)
    ax[1].set_xlabel("gamma (draft tokens per verify)")
    ax[1].set_title("held-out prompts, greedy, C++ engine (ModelOpt target)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote", path, flush=True)
