#!/usr/bin/python3
"""Self-consistency tests of the PyTorch reference (tools/reference/nemotron_ref.py). No C++ engine needed.

Run standalone:  /usr/bin/python3 tests/oracle/test_reference_selfcheck.py [-v]
(run_oracle.py also runs these first.)

(a) prefill logits row t == logits after feeding tokens 0..t one at a time with caches   (rel 1e-5)
(b) sequential SSM scan == independently coded chunked SSD form (nemotron_h.md §3.6)                (rel 1e-5)
(c) the Mamba gated norm is grouped (other groups untouched when one group's input changes)
plus: scalar-loop re-derivations of the Mamba mixer / attention / router straight from the spec pseudo-code,
the safetensors reader (F32/BF16/F16, sharded index, bare Infinity in config.json) and the dump format.
"""
import json
import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_ref as ref  # noqa: E402


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / (den if den > 0 else 1.0))


# ----------------------------------------------------------------------------------------------------------
# random tiny model, built in memory (independent of the engine's synth writer)
# ----------------------------------------------------------------------------------------------------------

def make_config(pattern="M*EM-EM*", H=32, V=97, NH=4, P=4, G=2, N=8, K=4, HQ=4, HKV=2, HD=8,
                E=8, topk=3, F=12, FS=16, inter=20, rscale=2.5, mtp=False, use_list=True):
    kinds = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
    cfg = {
        "model_type": "nemotron_h", "hidden_size": H, "vocab_size": V, "layer_norm_epsilon": 1e-5,
        "mamba_num_heads": NH, "mamba_head_dim": P, "n_groups": G, "ssm_state_size": N, "conv_kernel": K,
        "time_step_limit": [0.0, float("inf")], "num_attention_heads": HQ, "num_key_value_heads": HKV,
        "head_dim": HD, "n_routed_experts": E, "num_experts_per_tok": topk, "moe_intermediate_size": F,
        "n_shared_experts": 1, "moe_shared_expert_intermediate_size": FS, "norm_topk_prob": True,
        "routed_scaling_factor": rscale, "intermediate_size": inter, "tie_word_embeddings": False,
        "use_conv_bias": True, "chunk_size": 128,
    }
    if use_list:
        cfg["layers_block_type"] = [kinds[ch] for ch in pattern]
    else:
        cfg["hybrid_override_pattern"] = pattern
    if mtp:
        cfg["num_nextn_predict_layers"] = 1
        cfg["mtp_layers_block_type"] = ["attention", "moe"]
    return cfg


def _lin(g, out, inp, scale=1.0):
    return torch.randn(out, inp, generator=g, dtype=torch.float32) * (scale / math.sqrt(inp))


def make_tensors(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = ref.Config(cfg)
    H = c.H
    t = {"backbone.embeddings.weight": torch.randn(c.V, H, generator=g),
         "backbone.norm_f.weight": 1.0 + 0.1 * torch.randn(H, generator=g),
         "lm_head.weight": _lin(g, c.V, H, 2.0)}

    def moe_block(p):
        t[p + "gate.weight"] = _lin(g, c.E, H, 2.0)
        t[p + "gate.e_score_correction_bias"] = 0.05 * torch.randn(c.E, generator=g)
        for e in range(c.E):
            t[p + f"experts.{e}.up_proj.weight"] = _lin(g, c.F, H)
            t[p + f"experts.{e}.down_proj.weight"] = _lin(g, H, c.F)
        t[p + "shared_experts.up_proj.weight"] = _lin(g, c.FS, H)
        t[p + "shared_experts.down_proj.weight"] = _lin(g, H, c.FS)

    def attn_block(p):
        t[p + "q_proj.weight"] = _lin(g, c.HQ * c.HD, H, 2.0)
        t[p + "k_proj.weight"] = _lin(g, c.HKV * c.HD, H, 2.0)
        t[p + "v_proj.weight"] = _lin(g, c.HKV * c.HD, H)
        t[p + "o_proj.weight"] = _lin(g, H, c.HQ * c.HD)

    for i, kind in enumerate(c.kinds):
        p = f"backbone.layers.{i}."
        t[p + "norm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
        p += "mixer."
        if kind == "M":
            t[p + "in_proj.weight"] = _lin(g, c.DI + c.CD + c.NH, H)
            t[p + "conv1d.weight"] = 0.5 * torch.randn(c.CD, 1, c.K, generator=g)
            t[p + "conv1d.bias"] = 0.1 * torch.randn(c.CD, generator=g)
            dt0 = torch.exp(torch.rand(c.NH, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            t[p + "dt_bias"] = dt0 + torch.log(-torch.expm1(-dt0))      # inverse softplus
            t[p + "A_log"] = torch.log(1.0 + 15.0 * torch.rand(c.NH, generator=g))
            t[p + "D"] = 1.0 + 0.2 * torch.randn(c.NH, generator=g)
            t[p + "norm.weight"] = 1.0 + 0.1 * torch.randn(c.DI, generator=g)
            t[p + "out_proj.weight"] = _lin(g, H, c.DI)
        elif kind == "*":
            attn_block(p)
        elif kind == "E":
            moe_block(p)
        else:
            t[p + "up_proj.weight"] = _lin(g, int(c.inter), H)
            t[p + "down_proj.weight"] = _lin(g, H, int(c.inter))
    if c.n_mtp:
        p0 = "mtp.layers.0."
        t[p0 + "enorm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
        t[p0 + "hnorm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
        t[p0 + "eh_proj.weight"] = _lin(g, H, 2 * H)
        t[p0 + "norm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
        attn_block(p0 + "mixer.")
        p1 = "mtp.layers.1."
        t[p1 + "norm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
        moe_block(p1 + "mixer.")
        t[p1 + "final_layernorm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=g)
    return t


# ----------------------------------------------------------------------------------------------------------
# independent chunked SSD (nemotron_h.md §3.6)
# ----------------------------------------------------------------------------------------------------------

ssd_chunked = ref.ssm_scan_chunked  # moved into the reference (training uses it); still checked here


# ----------------------------------------------------------------------------------------------------------
# scalar-loop re-derivations straight from the spec pseudo-code (tiny sizes only)
# ----------------------------------------------------------------------------------------------------------

def scalar_mamba(model, i, hn_rows, conv_win, S):
    """Per-element loops following nemotron_h.md §3.2-3.7. conv_win: list of K-1 raw xBC rows (python lists),
    S: nested lists [NH][P][N]. Returns (outputs, conv_win, S)."""
    c = model.cfg
    p = f"backbone.layers.{i}.mixer."
    W = {k: model.W(p + k).double().tolist() for k in
         ["in_proj.weight", "conv1d.bias", "dt_bias", "A_log", "D", "norm.weight", "out_proj.weight"]}
    cw = model.W(p + "conv1d.weight").double().tolist()
    outs = []
    for hn in hn_rows:
        proj = [sum(W["in_proj.weight"][r][q] * hn[q] for q in range(c.H)) for r in range(c.DI + c.CD + c.NH)]
        z = proj[:c.DI]
        xbc = proj[c.DI:c.DI + c.CD]
        dtr = proj[c.DI + c.CD:]
        window = conv_win + [xbc]                      # oldest ... newest
        conv = []
        for ch in range(c.CD):
            acc = W["conv1d.bias"][ch]
            for k in range(c.K):
                acc += cw[ch][0][k] * window[k][ch]     # tap K-1 multiplies the newest
            conv.append(acc / (1.0 + math.exp(-acc)))
        conv_win = window[1:]
        x = conv[:c.DI]
        Bv = conv[c.DI:c.DI + c.G * c.N]
        Cv = conv[c.DI + c.G * c.N:]
        y = [0.0] * c.DI
        for h in range(c.NH):
            g = h // (c.NH // c.G)
            v = dtr[h] + W["dt_bias"][h]
            dt = v if v > 20 else math.log1p(math.exp(v))
            A = -math.exp(W["A_log"][h])
            dA = math.exp(dt * A)
            for pp in range(c.P):
                xv = x[h * c.P + pp]
                acc = 0.0
                for n in range(c.N):
                    S[h][pp][n] = S[h][pp][n] * dA + (Bv[g * c.N + n] * dt) * xv
                    acc += S[h][pp][n] * Cv[g * c.N + n]
                y[h * c.P + pp] = acc + W["D"][h] * xv
        u = [y[j] * (z[j] / (1.0 + math.exp(-z[j]))) for j in range(c.DI)]
        gs = c.DI // c.G
        for k in range(c.G):
            seg = u[k * gs:(k + 1) * gs]
            r = 1.0 / math.sqrt(sum(s * s for s in seg) / gs + c.eps)
            for j in range(gs):
                u[k * gs + j] = seg[j] * r * W["norm.weight"][k * gs + j]
        outs.append([sum(W["out_proj.weight"][r][j] * u[j] for j in range(c.DI)) for r in range(c.H)])
    return outs, conv_win, S


def scalar_route(model, p, hn):
    c = model.cfg
    Wg = model.W(p + "gate.weight").double().tolist()
    bias = model.W(p + "gate.e_score_correction_bias").double().tolist()
    s = []
    for e in range(c.E):
        lg = sum(Wg[e][q] * hn[q] for q in range(c.H))
        s.append(1.0 / (1.0 + math.exp(-lg)))
    sel = [s[e] + bias[e] for e in range(c.E)]
    allowed = set(range(c.E))
    if c.n_group > 1:   # §5.2 grouped top-k: a group scores the sum of its two best biased scores
        per = c.E // c.n_group
        gscore = [sum(sorted(sel[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(c.n_group)]
        kept = []
        for _ in range(c.topk_group):
            kept.append(max((g for g in range(c.n_group) if g not in kept), key=lambda g: (gscore[g], -g)))
        allowed = {g * per + i for g in kept for i in range(per)}
    chosen = []
    for _ in range(c.topk):
        best = None
        for e in range(c.E):
            if e in chosen or e not in allowed:
                continue
            if best is None or sel[e] > sel[best]:     # strict '>' keeps the lowest index on ties
                best = e
        chosen.append(best)
    chosen.sort()
    w = [s[e] for e in chosen]
    tot = sum(w)
    w = [x / (tot + 1e-20) * c.rscale for x in w]
    return chosen, w


# ----------------------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------------------

class SelfCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.cfg = make_config()
        cls.tensors = make_tensors(cls.cfg, seed=1)
        cls.model = ref.NemotronH(cls.cfg, cls.tensors)

    # (a)
    def test_a_prefill_equals_decode(self):
        m = self.model
        rng = np.random.default_rng(5)
        ids = [int(v) for v in rng.integers(0, m.cfg.V, size=24)]
        with torch.no_grad():
            pre = m.forward(ids, m.new_state()).numpy()
            st = m.new_state()
            worst = 0.0
            for t, tok in enumerate(ids):
                row = m.forward([tok], st)[0].numpy()
                e = rel_err(row, pre[t])
                worst = max(worst, e)
                self.assertLessEqual(e, 1e-5, f"row {t}: rel err {e:.3e}")
            # mixed: prefill 10, then a 5-token chunk, then single tokens
            st = m.new_state()
            parts = [m.forward(ids[:10], st), m.forward(ids[10:15], st)] + \
                [m.forward([x], st) for x in ids[15:]]
            mixed = torch.cat(parts, 0).numpy()
        self.assertLessEqual(rel_err(mixed, pre), 1e-5)
        self.assertGreater(np.abs(pre).max(), 0.1)        # not a degenerate all-zero model

    def test_a_f64_agrees_with_f32(self):
        m64 = ref.NemotronH(self.cfg, self.tensors, dtype=torch.float64)
        ids = list(range(3, 40, 3))
        with torch.no_grad():
            a = self.model.forward(ids, self.model.new_state()).numpy()
            b = m64.forward(ids, m64.new_state()).numpy()
        self.assertLessEqual(rel_err(a, b), 1e-5)

    # (b)
    def _scan_inputs(self, dtype, T=300, NH=4, P=3, G=2, N=5, seed=3, zero_state=False):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(T, NH, P, generator=g, dtype=torch.float64)
        dt = torch.nn.functional.softplus(torch.randn(T, NH, generator=g, dtype=torch.float64) - 2.0)
        A = -torch.exp(torch.log(1 + 15 * torch.rand(NH, generator=g, dtype=torch.float64)))
        B = torch.randn(T, G, N, generator=g, dtype=torch.float64)
        C = torch.randn(T, G, N, generator=g, dtype=torch.float64)
        D = torch.randn(NH, generator=g, dtype=torch.float64)
        S0 = torch.zeros(NH, P, N, dtype=torch.float64) if zero_state else \
            torch.randn(NH, P, N, generator=g, dtype=torch.float64)
        return [v.to(dtype) for v in (x, dt, A, B, C, D, S0)], NH // G

    def test_b_sequential_equals_chunked_ssd(self):
        for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            for Q in (128, 7, 1):
                for zero in (True, False):
                    (x, dt, A, B, C, D, S0), hpg = self._scan_inputs(dtype, zero_state=zero)
                    y1, s1 = ref.ssm_scan_sequential(x, dt, A, B, C, D, S0, hpg)
                    y2, s2 = ssd_chunked(x, dt, A, B, C, D, S0, hpg, Q)
                    ey, es = rel_err(y1, y2), rel_err(s1, s2)
                    self.assertLessEqual(ey, tol, f"{dtype} Q={Q} zero={zero}: y rel err {ey:.3e}")
                    self.assertLessEqual(es, tol, f"{dtype} Q={Q} zero={zero}: state rel err {es:.3e}")

    def test_b_model_with_chunked_scan(self):
        """Whole-model logits with the SSD chunked scan (chunk 128) substituted: 140 tokens cross the boundary."""
        m = self.model
        ids = [int(v) for v in np.random.default_rng(9).integers(0, m.cfg.V, size=140)]
        with torch.no_grad():
            a = m.forward(ids, m.new_state()).numpy()
            try:
                m.scan_chunk = 128
                b = m.forward(ids, m.new_state()).numpy()
            finally:
                m.scan_chunk = None
        self.assertLessEqual(rel_err(b, a), 1e-5)

    # (c)
    def test_c_gated_norm_is_grouped(self):
        g = torch.Generator().manual_seed(11)
        T, G, DI = 3, 4, 32
        y = torch.randn(T, DI, generator=g)
        z = torch.randn(T, DI, generator=g)
        w = 1 + 0.1 * torch.randn(DI, generator=g)
        base = ref.gated_group_rmsnorm(y, z, w, G, 1e-5)
        gs = DI // G
        for k in range(G):
            y2, z2 = y.clone(), z.clone()
            y2[:, k * gs:(k + 1) * gs] *= 7.0
            z2[:, k * gs:(k + 1) * gs] += 0.3
            out = ref.gated_group_rmsnorm(y2, z2, w, G, 1e-5)
            for j in range(G):
                same = torch.equal(out[:, j * gs:(j + 1) * gs], base[:, j * gs:(j + 1) * gs])
                self.assertEqual(same, j != k, f"perturb group {k}: group {j} same={same}")
        # each group has unit RMS before the weight
        u = ref.gated_group_rmsnorm(y, z, torch.ones(DI), G, 0.0).reshape(T, G, gs)
        self.assertTrue(torch.allclose((u * u).mean(-1), torch.ones(T, G), atol=1e-5))
        # and it is not the ungrouped norm
        ung = ref.gated_group_rmsnorm(y, z, w, 1, 1e-5)
        self.assertGreater((ung - base).abs().max().item(), 1e-3)

    # scalar re-derivations
    def test_mamba_layer_matches_scalar_loops(self):
        cfg = make_config(pattern="M", H=6, V=11, NH=4, P=2, G=2, N=3, K=4)
        m = ref.NemotronH(cfg, make_tensors(cfg, seed=4), dtype=torch.float64)
        c = m.cfg
        g = torch.Generator().manual_seed(2)
        hn = torch.randn(9, c.H, generator=g, dtype=torch.float64)
        ls = ref.LayerState()
        with torch.no_grad():
            o1 = m.mamba(0, hn[:5], ls)          # chunk, then continue from cache
            o2 = m.mamba(0, hn[5:6], ls)
            o3 = m.mamba(0, hn[6:], ls)
        vec = torch.cat([o1, o2, o3], 0).numpy()
        S = [[[0.0] * c.N for _ in range(c.P)] for _ in range(c.NH)]
        win = [[0.0] * c.CD for _ in range(c.K - 1)]
        sc, win, S = scalar_mamba(m, 0, hn.tolist(), win, S)
        self.assertLessEqual(rel_err(vec, np.array(sc)), 1e-12)
        self.assertLessEqual(rel_err(ls.ssm.numpy(), np.array(S)), 1e-12)
        self.assertLessEqual(rel_err(ls.conv.numpy(), np.array(win)), 1e-12)

    def test_attention_matches_scalar_loops(self):
        cfg = make_config(pattern="*", H=6, V=11, HQ=6, HKV=2, HD=3)
        m = ref.NemotronH(cfg, make_tensors(cfg, seed=6), dtype=torch.float64)
        c = m.cfg
        g = torch.Generator().manual_seed(3)
        hn = torch.randn(5, c.H, generator=g, dtype=torch.float64)
        ls = ref.LayerState()
        with torch.no_grad():
            vec = torch.cat([m.attention(0, hn[:3], ls), m.attention(0, hn[3:], ls)], 0).numpy()
        p = "backbone.layers.0.mixer."
        q = (hn @ m.W(p + "q_proj.weight").t()).tolist()
        k = (hn @ m.W(p + "k_proj.weight").t()).tolist()
        v = (hn @ m.W(p + "v_proj.weight").t()).tolist()
        Wo = m.W(p + "o_proj.weight").tolist()
        out = []
        for t in range(5):
            cat = []
            for i in range(c.HQ):
                j = i // (c.HQ // c.HKV)
                s = [sum(q[t][i * c.HD + d] * k[tau][j * c.HD + d] for d in range(c.HD)) / math.sqrt(c.HD)
                     for tau in range(t + 1)]
                mx = max(s)
                ex = [math.exp(x - mx) for x in s]
                tot = sum(ex)
                cat += [sum(ex[tau] / tot * v[tau][j * c.HD + d] for tau in range(t + 1)) for d in range(c.HD)]
            out.append([sum(Wo[r][q_] * cat[q_] for q_ in range(len(cat))) for r in range(c.H)])
        self.assertLessEqual(rel_err(vec, np.array(out)), 1e-12)

    def test_router_matches_scalar_and_ties(self):
        cfg = make_config(pattern="E", H=6, V=11, E=10, topk=4)
        t = make_tensors(cfg, seed=7)
        p = "backbone.layers.0.mixer."
        # make ties on the biased score: duplicate gate rows 2,5,7 and equal biases
        for e in (5, 7):
            t[p + "gate.weight"][e] = t[p + "gate.weight"][2]
        t[p + "gate.e_score_correction_bias"][[2, 5, 7]] = 2.0     # force them to the top, tied
        m = ref.NemotronH(cfg, t, dtype=torch.float64)
        g = torch.Generator().manual_seed(8)
        hn = torch.randn(6, m.cfg.H, generator=g, dtype=torch.float64)
        idx, w = m.route(hn, p)
        for r in range(6):
            ch, ws = scalar_route(m, p, hn[r].tolist())
            self.assertEqual(idx[r].tolist(), ch)
            self.assertLessEqual(rel_err(w[r].numpy(), np.array(ws)), 1e-14)
            self.assertTrue({2, 5, 7} <= set(ch))
        # bias used only for selection: weights are renormalised unbiased sigmoids, summing to rscale
        self.assertTrue(torch.allclose(w.sum(-1), torch.full((6,), m.cfg.rscale, dtype=torch.float64)))
        # a 3-way tie for the last slot picks the lowest index
        t2 = {k: v.clone() for k, v in t.items()}
        t2[p + "gate.e_score_correction_bias"][[2, 5, 7]] = -10.0
        t2[p + "gate.weight"][[0, 1, 3, 4, 6, 8, 9]] *= 0.0        # sigmoid 0.5 for these 7 experts
        t2[p + "gate.e_score_correction_bias"][[0, 1, 3, 4, 6, 8, 9]] = torch.tensor(
            [0.0, 0.3, 0.0, 0.2, 0.1, 0.0, 0.0], dtype=torch.float32)
        m2 = ref.NemotronH(cfg, t2, dtype=torch.float64)
        idx2, _ = m2.route(hn, p)
        for r in range(6):
            self.assertEqual(idx2[r].tolist(), [0, 1, 4, 6])      # 1,4,6 then lowest of the tied {0,3,8,9}

    def test_grouped_router_matches_scalar(self):
        # n_group 4 x 3 experts, topk_group 2, top-4: the choice must differ from ungrouped top-4 on some rows
        cfg = make_config(pattern="E", H=6, V=11, E=12, topk=4)
        cfg.update(n_group=4, topk_group=2)
        t = make_tensors(cfg, seed=9)
        p = "backbone.layers.0.mixer."
        t[p + "gate.e_score_correction_bias"] = 0.3 * torch.randn(12, generator=torch.Generator().manual_seed(3))
        m = ref.NemotronH(cfg, t, dtype=torch.float64)
        flat = ref.NemotronH(dict(cfg, n_group=1, topk_group=1), t, dtype=torch.float64)
        hn = torch.randn(40, m.cfg.H, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
        idx, w = m.route(hn, p)
        idx_flat, _ = flat.route(hn, p)
        for r in range(hn.shape[0]):
            ch, ws = scalar_route(m, p, hn[r].tolist())
            self.assertEqual(idx[r].tolist(), ch)
            self.assertLessEqual(rel_err(w[r].numpy(), np.array(ws)), 1e-14)
            self.assertLessEqual(len({e // 3 for e in ch}), 2)          # experts from at most topk_group groups
        changed = sum(idx[r].tolist() != idx_flat[r].tolist() for r in range(hn.shape[0]))
        self.assertGreater(changed, 0, "grouping never changed the choice: the test data does not exercise it")

    def test_moe_and_mlp_layer(self):
        cfg = make_config(pattern="E-", H=6, V=11, E=5, topk=2, F=4, FS=3, inter=5)
        m = ref.NemotronH(cfg, make_tensors(cfg, seed=12), dtype=torch.float64)
        g = torch.Generator().manual_seed(13)
        hn = torch.randn(4, m.cfg.H, generator=g, dtype=torch.float64)
        p = "backbone.layers.0.mixer."
        got = m.moe(0, hn).numpy()

        def r2(x, up, down):
            a = np.maximum(np.asarray(up) @ x, 0.0)
            return np.asarray(down) @ (a * a)

        for r in range(4):
            x = hn[r].numpy()
            ch, ws = scalar_route(m, p, x.tolist())
            exp = np.zeros(m.cfg.H)
            for e, wgt in zip(ch, ws):
                exp += wgt * r2(x, m.W(p + f"experts.{e}.up_proj.weight"), m.W(p + f"experts.{e}.down_proj.weight"))
            exp += r2(x, m.W(p + "shared_experts.up_proj.weight"), m.W(p + "shared_experts.down_proj.weight"))
            self.assertLessEqual(rel_err(got[r], exp), 1e-12)
        p1 = "backbone.layers.1.mixer."
        got = m.mlp(1, hn).numpy()
        for r in range(4):
            exp = r2(hn[r].numpy(), m.W(p1 + "up_proj.weight"), m.W(p1 + "down_proj.weight"))
            self.assertLessEqual(rel_err(got[r], exp), 1e-12)

    def test_softplus_threshold_and_dt_clamp(self):
        v = torch.tensor([-30.0, -1.0, 0.0, 19.9, 20.0, 20.5, 100.0], dtype=torch.float64)
        sp = ref.softplus20(v)
        for a, b in zip(v.tolist(), sp.tolist()):
            expv = a if a > 20 else math.log1p(math.exp(a))
            self.assertAlmostEqual(b, expv, places=12)
        self.assertTrue(torch.isfinite(ref.softplus20(torch.tensor([1e4]))).all())
        # default (0, inf): no clamp; a finite limit is honoured
        cfg = make_config(pattern="M")
        self.assertEqual((ref.Config(cfg).dt_lo, ref.Config(cfg).dt_hi), (0.0, float("inf")))
        cfg2 = dict(cfg, time_step_limit=[0.05, 0.06])
        t = make_tensors(cfg, seed=2)
        a = ref.NemotronH(cfg, t).forward([1, 2, 3], ref.State(1))
        b = ref.NemotronH(cfg2, t).forward([1, 2, 3], ref.State(1))
        self.assertGreater((a - b).abs().max().item(), 1e-4)

    def test_pattern_and_list_configs_agree(self):
        c1 = ref.Config(make_config(pattern="M*E-", use_list=True))
        c2 = ref.Config(make_config(pattern="M*E-", use_list=False))
        c3 = ref.Config(dict(make_config(pattern="M"), layers_block_type=None,
                             layer_types=["linear_attention", "full_attention", "moe", "mlp"]))
        self.assertEqual(c1.kinds, ["M", "*", "E", "-"])
        self.assertEqual(c2.kinds, c1.kinds)
        self.assertEqual(c3.kinds, c1.kinds)

    def test_safetensors_reader_and_checkpoint_loading(self):
        cfg = make_config(pattern="M*E")
        t = make_tensors(cfg, seed=21)
        with tempfile.TemporaryDirectory() as d:
            # config with bare Infinity, as HF writes it
            txt = json.dumps(cfg).replace("Infinity", "Infinity")
            self.assertIn("Infinity", txt)
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(txt)
            # shard 1: f32 writer; shard 2: hand-written BF16/F16 tensors
            names = sorted(t)
            half = len(names) // 2
            ref.write_safetensors(os.path.join(d, "a.safetensors"), {k: t[k] for k in names[:half]})
            header, blobs, off = {}, [], 0
            expect = {}
            for j, k in enumerate(names[half:]):
                a = t[k].numpy().astype(np.float32)
                if j % 2 == 0:   # BF16 (truncate -> exactly representable expectation)
                    bits = (a.view(np.uint32) >> 16).astype("<u2")
                    expect[k] = (bits.astype(np.uint32) << 16).view(np.float32)
                    dt, raw = "BF16", bits.tobytes()
                else:
                    h = a.astype("<f2")
                    expect[k] = h.astype(np.float32)
                    dt, raw = "F16", h.tobytes()
                header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
                blobs.append(raw)
                off += len(raw)
            header["__metadata__"] = {"format": "pt"}
            hb = json.dumps(header).encode()
            with open(os.path.join(d, "b.safetensors"), "wb") as f:
                f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
            wm = {k: "a.safetensors" for k in names[:half]}
            wm.update({k: "b.safetensors" for k in names[half:]})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": wm}, f)
            cfg2, t2 = ref.load_checkpoint(d)
        self.assertEqual(cfg2["time_step_limit"][1], float("inf"))
        self.assertEqual(set(t2), set(t))
        for k in names[:half]:
            self.assertTrue(torch.equal(t2[k], t[k]), k)
        for k in names[half:]:
            self.assertTrue(np.array_equal(t2[k].numpy(), expect[k]), k)
            self.assertEqual(tuple(t2[k].shape), tuple(t[k].shape))

    def test_greedy_dump_roundtrip_and_cli(self):
        cfg = make_config(pattern="ME*-")
        t = make_tensors(cfg, seed=31)
        m = ref.NemotronH(cfg, t)
        prompt = [3, 1, 4, 1, 5]
        pre, toks, dec = ref.greedy(m, prompt, 6)
        self.assertEqual(pre.shape, (5, m.cfg.V))
        self.assertEqual(dec.shape, (5, m.cfg.V))
        self.assertEqual(toks[0], int(np.argmax(pre[-1])))
        for j in range(1, 6):
            self.assertEqual(toks[j], int(np.argmax(dec[j - 1])))
        # full re-prefill of prompt + generated tokens reproduces the decode rows
        with torch.no_grad():
            full = m.forward(prompt + toks[:-1], m.new_state()).numpy()
        self.assertLessEqual(rel_err(full[5:], dec), 1e-5)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            ref.write_safetensors(os.path.join(d, "model.safetensors"), t)
            out = os.path.join(d, "dump")
            rc = ref.main(["--model", d, "--ids", "3,1,4,1,5", "--gen", "6", "--out", out])
            self.assertEqual(rc, 0)
            meta, p2, d2 = ref.read_dump(out)
            self.assertEqual(meta, {"prompt": prompt, "tokens": toks, "vocab": m.cfg.V,
                                    "prefill_rows": 5, "decode_rows": 5})
            self.assertEqual(os.path.getsize(out + ".f32"), 10 * m.cfg.V * 4)
            self.assertTrue(np.array_equal(p2, pre) and np.array_equal(d2, dec))

    def test_mtp_step(self):
        cfg = make_config(pattern="ME*", mtp=True)
        t = make_tensors(cfg, seed=41)
        m = ref.NemotronH(cfg, t)
        prompt = [5, 9, 2, 7, 3, 8]
        pre, toks, dec, hid = ref.greedy(m, prompt, 3, return_hidden=True)
        lg = ref.mtp_dump(m, prompt, toks, hid)
        self.assertEqual(lg.shape, (6, m.cfg.V))
        # slot-by-slot with the MTP KV cache equals the batched MTP pass
        st = m.new_mtp_state()
        nxt = prompt[1:] + [toks[0]]
        with torch.no_grad():
            rows = [m.mtp_step(hid[i:i + 1], [nxt[i]], st)[0][0].numpy() for i in range(6)]
        self.assertLessEqual(rel_err(np.stack(rows), lg), 1e-5)
        # concat order [enorm(e), hnorm(h)]: zeroing the first H input columns of eh_proj removes the token
        t2 = dict(t)
        t2["mtp.layers.0.eh_proj.weight"] = t["mtp.layers.0.eh_proj.weight"].clone()
        t2["mtp.layers.0.eh_proj.weight"][:, :m.cfg.H] = 0.0
        m2 = ref.NemotronH(cfg, t2)
        with torch.no_grad():
            a = m2.mtp_step(hid[:1], [1], m2.new_mtp_state())[0]
            b = m2.mtp_step(hid[:1], [2], m2.new_mtp_state())[0]
        self.assertTrue(torch.equal(a, b))

    def test_pitfall_variants_are_distinguishable(self):
        """Every deliberately-wrong variant used by run_oracle's diagnosis changes the logits."""
        cfg = dict(make_config(pattern="M*EM-E", HD=6), time_step_min=0.05)
        t = make_tensors(cfg, seed=51)
        ids = [4, 8, 15, 16, 23, 42, 7, 1]
        with torch.no_grad():
            base = ref.NemotronH(cfg, t).forward(ids, ref.State(6)).numpy()
            for var in sorted(ref.NemotronH.VARIANTS):
                m = ref.NemotronH(cfg, t, variants=[var])
                out = m.forward(ids, m.new_state()).numpy()
                self.assertGreater(rel_err(out, base), 1e-3, var)


def run(verbosity=1):
    """Run the suite; returns (n_run, n_failed_or_errored, text report)."""
    import io
    buf = io.StringIO()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfCheck)
    res = unittest.TextTestRunner(stream=buf, verbosity=verbosity).run(suite)
    return res.testsRun, len(res.failures) + len(res.errors), buf.getvalue()


if __name__ == "__main__":
    unittest.main()
