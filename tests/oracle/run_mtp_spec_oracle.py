#!/usr/bin/python3
"""MTP speculative-decoding oracle: a whole greedy speculative run of the C++ engine with its MTP drafter
(`nemotron dump --spec mtp --draft-max G`) against the independent PyTorch reference (tools/reference/nemotron_ref.py).

    /usr/bin/python3 tests/oracle/run_mtp_spec_oracle.py --nemotron build/nemotron [--keep DIR]

run_oracle.py compares the MTP head on the prompt slots only. Here every drafting round of a speculative run is
compared: the engine writes, per round, the anchor position p, its drafts d_1..d_k and the logits each draft was
taken from (row 0 from MTP slot p-1, row j from the j-th slot chained on the module's own output and d_j). The
reference recomputes every round FROM SCRATCH: the target's post-norm_f hidden rows of the committed sequence
(seq = prompt + emitted tokens), a fresh MTP state filled with slots 0..p-1 = (h_i, seq[i+1]) (nemotron_h.md §6.2),
then the chain (h', d_j) on top. The engine instead keeps one MTP cache for the whole run, appends chained slots while
drafting, and truncates them at the next commit after the verify (rejections). So a chained step or a truncation /
rollback that is off shows as a difference from the fresh recomputation. Checked per case:
  * format: kind "mtp", gamma, vocab, rows of PREFIX.draft_mtp.f32 = total drafts, 1 <= k <= gamma;
  * the p chain: first p = prompt length, next p = p + accepted + 1 (accepted = leading drafts equal to the tokens
    the target then emitted);
  * max over rows of max|engine - ref| / max|ref| of the draft logits <= --tol (measured, see DEFAULT_TOL);
  * every draft == argmax of the engine's own row and of the reference's row (except reference near-ties,
    margin <= --tie-tol relative, counted);
  * lossless: the emitted tokens equal the reference's greedy tokens, and the verify rows (PREFIX.f32, the rows
    each token was decided from) match the reference's greedy rows (teacher-forced) within --target-tol and are
    bitwise the rows of the engine's plain `dump` (no speculation): the target's rollback after rejections;
  * coverage: rounds with a rejection after chained steps, and (trained model) rounds that accept part of a chain.
Last line: `mtp-spec-oracle: P passed, F failed`; exit status 1 on any failure.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_ref as ref  # noqa: E402
from run_oracle import Case, prompt_for, row_rel_errors  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# Measured (AVX-512 machine, every case below): draft logits (chained rows included) 1.3e-6 relative, verify rows
# 8.9e-7; both bounds are 5e-6 (~4x and ~5.6x). Shown failing: no truncation of the chained slots at commit (60 of 63
# rows off, up to 1.0 relative), chaining on the seed hidden instead of the module's own output (every depth-2 row off).
DEFAULT_TOL = 5e-6
DEFAULT_TARGET_TOL = 5e-6
DEFAULT_TIE_TOL = 3e-5
# (label, model: synth preset args or a models/ directory, prompt lengths, gammas, tokens generated)
CASES = [
    dict(tag="tiny-a-f32", synth=["--preset", "tiny-a", "--dtype", "f32", "--seed", "131"], lens=[7, 40],
         gammas=[3], gen=24, need_partial=False),
    dict(tag="tiny-c-f32", synth=["--preset", "tiny-c", "--dtype", "f32", "--seed", "132"], lens=[12],
         gammas=[2], gen=20, need_partial=False),
    # the trained family's target (ModelOpt NVFP4 experts): its MTP head predicts, so chains are partly accepted
    dict(tag="tiny-code", model=os.path.join(ROOT, "models", "tiny-code"), lens=[9, 30], gammas=[3, 5], gen=40,
         need_partial=True),
]


def run_cmd(cmd, timeout):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def reference_rounds(model, seq, rounds):
    """Draft-logit rows of every round, recomputed from scratch: [total drafts, V] float32 (see module doc)."""
    with torch.no_grad():
        hid = model.hidden(seq, model.new_state())                 # post-norm_f rows of the committed sequence
        rows = []
        for r in rounds:
            p, drafts = int(r["p"]), [int(x) for x in r["drafts"]]
            st = model.new_mtp_state()
            lg, hp = model.mtp_step(hid[:p], seq[1:p + 1], st)     # committed slots 0..p-1
            rows.append(lg[-1])
            h = hp[-1:]
            for d in drafts[:-1]:                                  # chained slots p, p+1, ...
                lg, h = model.mtp_step(h, [d], st)
                rows.append(lg[0])
    if not rows:
        return np.zeros((0, model.cfg.V), np.float32)
    return torch.stack(rows).to(torch.float32).numpy()


def check_case(case, args, model, model_dir, prompt, gamma, gen, need_partial, work):
    os.makedirs(work, exist_ok=True)
    pe = os.path.join(work, "engine")
    base = [args.nemotron, "dump", "--model", model_dir, "--ids", ",".join(map(str, prompt)), "--gen", str(gen),
            "--threads", str(args.threads)]
    cmd = base + ["--out", pe, "--spec", "mtp", "--draft-max", str(gamma)]
    rc, out = run_cmd(cmd, args.timeout)
    if rc != 0:
        case.fail(f"engine dump exited {rc}: {' '.join(cmd)}\n" + "\n".join("    | " + l for l in out.splitlines()[-12:]))
        return None
    meta, epre, edec = ref.read_dump(pe)
    with open(pe + ".draft.json") as f:
        dj = json.load(f)
    V = model.cfg.V
    etoks = [int(x) for x in meta["tokens"]]
    rounds = dj.get("rounds", [])
    n_rows = sum(len(r["drafts"]) for r in rounds)
    elog = np.fromfile(pe + ".draft_mtp.f32", dtype="<f4")
    if dj.get("kind") != "mtp" or dj.get("gamma") != gamma or dj.get("vocab") != V:
        case.fail(f"draft.json header {({k: dj.get(k) for k in ('kind', 'gamma', 'vocab')})}, "
                  f"expected mtp / {gamma} / {V}")
    if elog.size != n_rows * V:
        case.fail(f"draft_mtp.f32 holds {elog.size} floats, expected {n_rows} rows x {V}")
        return None
    elog = elog.reshape(n_rows, V)

    # the target's rollback after rejections: every row a token was decided from is bitwise the plain decode's row
    pp = os.path.join(work, "plain")
    rc, out = run_cmd(base + ["--out", pp], args.timeout)
    if rc != 0:
        case.fail(f"plain engine dump exited {rc}")
        return None
    _, ppre, pdec = ref.read_dump(pp)
    if not (np.array_equal(epre.view(np.uint32), ppre.view(np.uint32)) and
            np.array_equal(edec.view(np.uint32), pdec.view(np.uint32))):
        case.fail("the speculative run's logit rows are not bitwise those of the plain (no speculation) dump")

    # lossless: the reference's own greedy tokens, and its rows teacher-forced with the engine's tokens
    rpre, rtoks, rdec = ref.greedy(model, prompt, gen, force_tokens=etoks)
    if rtoks != etoks:
        j = next(i for i in range(gen) if rtoks[i] != etoks[i])
        case.fail(f"speculative tokens differ from the reference's greedy tokens at {j}: {etoks[j]} vs {rtoks[j]}")
    terr = max(row_rel_errors(epre[-1:], rpre[-1:]).max(initial=0), row_rel_errors(edec, rdec).max(initial=0))
    if terr > args.target_tol:
        case.fail(f"verify rows differ from the reference by {terr:.2e} > {args.target_tol:g}")

    # the p chain and acceptance, from the emitted tokens
    seq = list(prompt) + etoks
    expect_p = len(prompt)
    n_acc = n_rej_chained = n_partial = 0
    for j, r in enumerate(rounds):
        p, d = int(r["p"]), [int(x) for x in r["drafts"]]
        if p != expect_p:
            case.fail(f"round {j}: p = {p}, expected {expect_p} (previous p + accepted + 1)")
            return None
        if not 1 <= len(d) <= gamma:
            case.fail(f"round {j}: {len(d)} drafts (gamma {gamma})")
        acc = 0
        while acc < len(d) and p + 1 + acc < len(seq) and d[acc] == seq[p + 1 + acc]:
            acc += 1
        n_acc += acc
        n_rej_chained += int(len(d) >= 2 and acc < len(d))
        n_partial += int(0 < acc < len(d))
        expect_p = p + acc + 1

    rlog = reference_rounds(model, seq, rounds)
    errs = row_rel_errors(elog, rlog)
    w = int(np.argmax(errs)) if len(errs) else 0
    worst = float(errs[w]) if len(errs) else 0.0
    bad = np.nonzero(errs > args.tol)[0]
    if len(bad):
        case.fail(f"{len(bad)}/{n_rows} draft-logit rows exceed {args.tol:g}; first row {bad[0]} "
                  f"(rel {errs[bad[0]]:.3e}), worst {worst:.3e} at row {w}")
    ties = 0
    flat = [int(x) for r in rounds for x in r["drafts"]]
    for i, t in enumerate(flat):
        if t != int(np.argmax(elog[i])):
            case.fail(f"draft row {i}: token {t} is not the argmax of the engine's own logits")
            break
        order = np.argsort(-rlog[i].astype(np.float64), kind="stable")
        if t != int(order[0]):
            margin = (rlog[i][order[0]] - rlog[i][order[1]]) / max(np.abs(rlog[i]).max(), 1e-30)
            if margin <= args.tie_tol:
                ties += 1
            else:
                case.fail(f"draft row {i}: engine drafted {t}, the reference's argmax is {order[0]} (margin {margin:.2e})")
                break
    case.info(f"gamma {gamma}: {len(rounds)} rounds, {n_rows} drafts, {n_acc} accepted, {n_rej_chained} rounds "
              f"rejecting after chained steps, {n_partial} partly accepted; draft logits max rel {worst:.2e} "
              f"(row {w}), verify rows {terr:.2e}, {ties} near-ties")
    if len(rounds) < 3 or n_rej_chained == 0:
        case.fail("too few rounds with a rejection after chained steps: cache truncation is not exercised")
    if need_partial and n_partial == 0:
        case.fail("no round accepted part of its chain: committing several slots is not exercised")
    return worst, terr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemotron", required=True)
    ap.add_argument("--keep", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--tol", type=float, default=DEFAULT_TOL)
    ap.add_argument("--target-tol", type=float, default=DEFAULT_TARGET_TOL)
    ap.add_argument("--tie-tol", type=float, default=DEFAULT_TIE_TOL)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    root = args.keep or tempfile.mkdtemp(prefix="nemotron-mtp-spec-")
    os.makedirs(root, exist_ok=True)
    passed = failed = 0
    worst = [0.0, 0.0]
    t0 = time.time()
    try:
        for c in CASES:
            mdir = c.get("model") or os.path.join(root, c["tag"])
            setup = None
            model = None
            try:
                if "synth" in c:
                    rc, out = run_cmd([args.nemotron, "synth", *c["synth"], "--out", mdir], args.timeout)
                    if rc != 0:
                        raise RuntimeError(f"synth exited {rc}: {out[-1000:]}")
                elif not os.path.isdir(mdir):
                    raise RuntimeError(f"{mdir} is missing (the committed trained family, docs/MODELS.md)")
                cfg, tensors = ref.load_checkpoint(mdir)
                model = ref.NemotronH(cfg, tensors, dtype=torch.float32)
            except Exception as e:  # noqa: BLE001
                setup = f"cannot set up {c['tag']}: {e}"
            for L in c["lens"]:
                for g in c["gammas"]:
                    case = Case(f"{c['tag']} len={L} gamma={g} gen={c['gen']}")
                    if setup:
                        case.fail(setup)
                    else:
                        try:
                            prompt = prompt_for(1000 + L, L, model.cfg.V)
                            r = check_case(case, args, model, mdir, prompt, g, c["gen"], c["need_partial"],
                                           os.path.join(root, f"{c['tag']}-len{L}-g{g}"))
                            if r:
                                worst = [max(worst[0], r[0]), max(worst[1], r[1])]
                        except Exception as e:  # noqa: BLE001
                            case.fail(f"exception: {e}\n" + traceback.format_exc())
                    passed, failed = (passed + 1, failed) if case.report() else (passed, failed + 1)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"(worst draft logits {worst[0]:.2e} <= {args.tol:g}, verify rows {worst[1]:.2e} <= {args.target_tol:g}; "
          f"total {time.time() - t0:.1f}s)")
    print(f"mtp-spec-oracle: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
