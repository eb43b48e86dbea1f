#!/usr/bin/python3
"""Self-checks of the DFlash/DSpark drafter reference (tools/reference/drafter_ref.py). No C++ engine needed:
models are built in memory (random weights) or written by the reference's own safetensors writer.

Run standalone:  /usr/bin/python3 tests/oracle/test_drafter_selfcheck.py [-v]
(run_drafter_oracle.py runs these first.)

  * YaRN: low/high = 25/50 and mscale 0.1 ln 128 + 1 for head_dim 128, theta 1e4, factor 128, original 8192;
    RoPE is NeoX rotate-half and relative (q.k depends on m-n only; times mscale^2 for YaRN), also at 1e6
  * taps: captured residual after block L; the last block's tap is pre-norm_f; a prefix run gives the same rows
  * DSpark truncation: running Q rows or 8 rows gives identical first rows (causal block); DFlash does not
  * zeroing the taps changes the drafter logits (the context path is live); so does one context row
  * attention (masks, window, sinks, GQA) against scalar loops written straight from spec §1.5/§3.2
  * sliding window: context rows j <= p-W are invisible, row p-W+1 is visible
  * Markov: final = base + W2 W1[prev], prev = anchor then the previous draft; drafts = argmax
  * loader: `model.` prefix and a dense checkpoint on disk
  * C++-free round trip: the reference's own dump passes check_draft_dump, perturbed / deliberately wrong dumps
    fail
"""
import json
import math
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_ref as nref  # noqa: E402
import drafter_ref as dref  # noqa: E402
import test_reference_selfcheck as tsc  # noqa: E402


rel_err = tsc.rel_err  # max|a-b| / max|b|


# ----------------------------------------------------------------------------------------------------------
# random in-memory drafters (own generator, independent of the engine's synth)
# ----------------------------------------------------------------------------------------------------------

def make_drafter_config(kind, H=32, V=97, L=2, nH=4, nKV=2, d=8, F=24, taps=(1, 3, 5), mask=90, window=1024,
                        rank=16, n_target_layers=6):
    cfg = {
        "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": nH,
        "num_key_value_heads": nKV, "head_dim": d, "intermediate_size": F, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "attention_bias": False, "vocab_size": V, "max_position_embeddings": 1048576,
        "rope_theta": 10000, "num_target_layers": n_target_layers, "mask_token_id": mask,
        "target_layer_ids": list(taps), "has_embed_tokens": True, "has_lm_head": False, "sample_from_anchor": False,
        "draft_vocab_size": None,
    }
    if kind == "dflash":
        cfg.update({"architectures": ["DFlashDraftModel"], "layer_types": ["full_attention"] * L,
                    "sliding_window": None, "attention_sink_bias": False,
                    "rope_parameters": {"rope_type": "yarn", "factor": 128.0,
                                        "original_max_position_embeddings": 8192, "rope_theta": 10000},
                    "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(taps), "causal": False,
                                      "use_swa": False, "attention_sink_bias": False, "sample_from_anchor": False}})
    else:
        cfg.update({"architectures": ["Qwen3DSparkModel"], "block_size": 8, "rope_parameters": None,
                    "layer_types": ["sliding_attention"] * L, "sliding_window": window, "attention_sink_bias": True,
                    "dflash_config": {"attention_sink_bias": True, "causal": True, "mask_token_id": mask,
                                      "swa_window_size": window, "target_layer_ids": list(taps), "use_swa": True,
                                      "sample_from_anchor": False},
                    "dspark_fixup_head_type": "markov", "dspark_markov_rank": rank, "markov_head_type": "vanilla",
                    "markov_rank": rank})
    return cfg


def make_drafter_tensors(cfg, target_H, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = dref.DrafterConfig(cfg)
    H, d = c.H, c.d

    def lin(o, i, s=1.0):
        return torch.randn(o, i, generator=g) * (s / math.sqrt(i))

    def nw(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    t = {"embed_tokens.weight": torch.randn(c.V, H, generator=g), "fc.weight": lin(H, len(c.taps) * target_H),
         "hidden_norm.weight": nw(H), "norm.weight": nw(H)}
    for l in range(c.L):
        p = f"layers.{l}."
        t[p + "input_layernorm.weight"] = nw(H)
        t[p + "post_attention_layernorm.weight"] = nw(H)
        t[p + "self_attn.q_proj.weight"] = lin(c.nH * d, H, 2.0)
        t[p + "self_attn.k_proj.weight"] = lin(c.nKV * d, H, 2.0)
        t[p + "self_attn.v_proj.weight"] = lin(c.nKV * d, H)
        t[p + "self_attn.o_proj.weight"] = lin(H, c.nH * d)
        t[p + "self_attn.q_norm.weight"] = nw(d)
        t[p + "self_attn.k_norm.weight"] = nw(d)
        t[p + "mlp.gate_proj.weight"] = lin(c.F, H)
        t[p + "mlp.up_proj.weight"] = lin(c.F, H)
        t[p + "mlp.down_proj.weight"] = lin(H, c.F)
        if c.sinks:
            t[p + "self_attn.attention_sink_bias"] = 1.5 * torch.randn(c.nH, generator=g)
    if c.kind == "dspark":
        r = int(c.markov_rank)
        t["markov_head.markov_w1.weight"] = torch.randn(c.V, r, generator=g)
        t["markov_head.markov_w2.weight"] = lin(c.V, r, 2.0)
    return t


def make_pair(kind, seed=5, window=1024, target_pattern="M*EM-E", dtype=torch.float64, **kw):
    tcfg = tsc.make_config(pattern=target_pattern, H=24, V=97, NH=4, P=4, G=2, N=6, K=4, HQ=4, HKV=2, HD=6,
                           E=6, topk=2, F=10, FS=12, inter=14)
    tt = tsc.make_tensors(tcfg, seed=seed)
    target = nref.NemotronH(tcfg, tt, dtype=dtype)
    dcfg = make_drafter_config(kind, H=24, V=97, window=window, taps=(1, 3, len(target_pattern) - 1), **kw)
    dt = make_drafter_tensors(dcfg, target_H=24, seed=seed + 1)
    return tcfg, tt, target, dcfg, dt


def rand_tokens(n, V=97, seed=0):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, V, size=n)]


class DrafterSelfCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tcfg, cls.tt, cls.target, cls.dcfg_ds, cls.dt_ds = make_pair("dspark")
        _, _, _, cls.dcfg_df, cls.dt_df = make_pair("dflash", seed=5)
        cls.ds = dref.Drafter(cls.dcfg_ds, cls.dt_ds, cls.target)
        cls.df = dref.Drafter(cls.dcfg_df, cls.dt_df, cls.target)
        cls.seq = rand_tokens(30, seed=1)
        cls.ctx_ds = cls.ds.context(cls.seq)
        cls.ctx_df = cls.df.context(cls.seq)

    # -- RoPE / YaRN ------------------------------------------------------------------------------------------

    def test_yarn_low_high_lightning(self):
        inv, ms, low, high = dref.yarn_parameters(128, 10000.0, 128.0, 8192.0)
        self.assertEqual((low, high), (25, 50))
        self.assertAlmostEqual(ms, 0.1 * math.log(128) + 1, places=12)
        self.assertAlmostEqual(ms, 1.4852, places=4)
        i = np.arange(64)
        pf = 10000.0 ** (2 * i / 128)
        np.testing.assert_allclose(inv[:26], 1 / pf[:26], rtol=1e-15)          # ramp 0: extrapolation
        np.testing.assert_allclose(inv[50:], 1 / (128 * pf[50:]), rtol=1e-15)  # ramp 1: interpolation
        r = (37 - 25) / 25
        self.assertAlmostEqual(inv[37], (1 / (128 * pf[37])) * r + (1 / pf[37]) * (1 - r), places=15)
        self.assertTrue(np.all(np.diff(inv) < 0))
        # the drafter config path gives the same tables
        c = dref.DrafterConfig(make_drafter_config("dflash", H=256, nH=2, nKV=1, d=128))
        inv2, ms2 = dref.rope_tables(c.rope, 128)
        np.testing.assert_array_equal(inv, inv2)
        self.assertEqual(ms, ms2)
        # DSpark: plain RoPE
        c = dref.DrafterConfig(make_drafter_config("dspark", H=256, nH=2, nKV=1, d=128))
        inv3, ms3 = dref.rope_tables(c.rope, 128)
        np.testing.assert_allclose(inv3, 1 / pf, rtol=1e-15)
        self.assertEqual(ms3, 1.0)

    def test_rope_layout_and_relative(self):
        d = 8
        g = torch.Generator().manual_seed(3)
        q = torch.randn(1, 1, d, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, d, generator=g, dtype=torch.float64)
        for rope in ({"type": "default", "theta": 10000.0},
                     {"type": "yarn", "theta": 10000.0, "factor": 128.0, "orig": 8192.0, "beta_fast": 32.0,
                      "beta_slow": 1.0, "attention_factor": None, "truncate": True}):
            inv, ms = dref.rope_tables(rope, d)
            # rotate-half layout: pair (j, j + d/2) rotated by angle pos*inv[j], both scaled by mscale
            pos = 7
            y = dref.apply_rope(q, [pos], inv, ms)[0, 0]
            for j in range(d // 2):
                a, b = float(q[0, 0, j]), float(q[0, 0, j + d // 2])
                th = pos * inv[j]
                self.assertAlmostEqual(float(y[j]), ms * (a * math.cos(th) - b * math.sin(th)), places=12)
                self.assertAlmostEqual(float(y[j + d // 2]), ms * (b * math.cos(th) + a * math.sin(th)), places=12)

            def dot(m, n):
                return float((dref.apply_rope(q, [m], inv, ms) * dref.apply_rope(k, [n], inv, ms)).sum())
            ref = dot(5, 3)
            self.assertAlmostEqual(dot(105, 103), ref, places=9)
            self.assertAlmostEqual(dot(1_000_002, 1_000_000), ref, places=7)     # f64 angles at 1e6
            self.assertAlmostEqual(dot(0, 0), ms * ms * float((q * k).sum()), places=12)

    # -- taps ---------------------------------------------------------------------------------------------------

    def test_taps_are_prenorm_residuals(self):
        tg = self.target
        ids = self.seq[:9]
        taps = {L: None for L in range(tg.cfg.L)}
        st = tg.new_state()
        hf = tg.hidden(ids, st, taps=taps)
        hf0 = tg.hidden(ids, tg.new_state())
        self.assertEqual(float((hf - hf0).abs().max()), 0.0)                  # capture changes nothing
        last = taps[tg.cfg.L - 1]
        self.assertLess(rel_err(tg.norm(last, "backbone.norm_f.weight"), hf), 1e-14)   # last tap = norm_f input
        # manual residual recomputation of block 1's output from block 0's output
        h0 = taps[0]
        hn = tg.norm(h0, "backbone.layers.1.norm.weight")
        o = tg.attention(1, hn, nref.LayerState())
        self.assertLess(rel_err(h0 + o, taps[1]), 1e-13)
        f = self.ds.taps(ids)
        H = tg.cfg.H
        self.assertEqual(tuple(f.shape), (9, 3 * H))
        self.assertLess(rel_err(f[:, 2 * H:], last), 1e-15)
        dpost = dref.Drafter(self.dcfg_ds, self.dt_ds, tg, last_tap_postnorm=True)
        self.assertLess(rel_err(dpost.taps(ids)[:, 2 * H:], hf), 1e-15)
        self.assertLess(rel_err(dpost.taps(ids)[:, :2 * H], f[:, :2 * H]), 1e-15)

    def test_context_prefix_equals_full_run(self):
        p = 11
        ctx_p = self.ds.context(self.seq[:p])
        for (K, V), (Kf, Vf) in zip(ctx_p, self.ctx_ds):
            self.assertLess(rel_err(K, Kf[:p]), 1e-12)
            self.assertLess(rel_err(V, Vf[:p]), 1e-12)

    # -- block semantics -------------------------------------------------------------------------------------

    def test_dspark_truncation_exact(self):
        p = 12
        _, b8, _ = self.ds.draft(self.seq[p], p, 7, self.ctx_ds)
        for k in (1, 3, 5):
            _, bk, _ = self.ds.draft(self.seq[p], p, k, self.ctx_ds)
            self.assertLess(rel_err(bk, b8[:k]), 1e-12, f"k={k}")
        # contrast: DFlash is bidirectional in the block, so the mask slots depend on Q
        _, f8, _ = self.df.draft(self.seq[p], p, 7, self.ctx_df)
        _, f3, _ = self.df.draft(self.seq[p], p, 3, self.ctx_df)
        self.assertGreater(rel_err(f3, f8[:3]), 1e-3)

    def test_zero_taps_change_logits(self):
        p = 10
        for dr in (self.ds, self.df):
            ctx = dr.context(self.seq)
            zero = dr.context_kv(dr.fuse(torch.zeros_like(dr.taps(self.seq))))
            _, b, f = dr.draft(self.seq[p], p, 3, ctx)
            _, bz, fz = dr.draft(self.seq[p], p, 3, zero)
            self.assertGreater(rel_err(bz, b), 1e-2, dr.cfg.kind)
            self.assertTrue(torch.isfinite(bz).all())
            # one context row (position 4) alone matters too
            f_all = dr.taps(self.seq)
            f2 = f_all.clone()
            f2[4] = 0
            _, b2, _ = dr.draft(self.seq[p], p, 3, dr.context_kv(dr.fuse(f2)))
            self.assertGreater(rel_err(b2, b), 1e-5, dr.cfg.kind)
            # and a row after the anchor does not (context = rows 0..p-1 only)
            f3 = f_all.clone()
            f3[p] = 0
            _, b3, _ = dr.draft(self.seq[p], p, 3, dr.context_kv(dr.fuse(f3)))
            self.assertEqual(rel_err(b3, b), 0.0)

    def _loop_attention(self, dr, l, h, p, ctx_l):
        """Scalar loops straight from spec §1.5/§3.2 (only q/k/v projections borrowed)."""
        c = dr.cfg
        Q = h.shape[0]
        pos = list(range(p, p + Q))
        q = dr._qk(h, l, "q", pos)
        k = dr._qk(h, l, "k", pos)
        v = dr._heads(h @ dr.W(f"layers.{l}.self_attn.v_proj.weight").t(), c.nKV)
        W, causal = c.window[l], c.causal[l]
        sink = dr.t.get(f"layers.{l}.self_attn.attention_sink_bias") if c.sinks else None
        out = torch.zeros(Q, c.nH * c.d, dtype=torch.float64)
        for i in range(Q):
            qp = p + i
            for hd in range(c.nH):
                g = hd // (c.nH // c.nKV)
                keys = []
                for j in range(p):
                    if W is None or j > qp - W:
                        keys.append((ctx_l[0][j, g], ctx_l[1][j, g]))
                for m in range(Q):
                    if (not causal or m <= i) and (W is None or p + m > qp - W):
                        keys.append((k[m, g], v[m, g]))
                s = [float((q[i, hd] * kk).sum()) / math.sqrt(c.d) for kk, _ in keys]
                mx = max(s + ([float(sink[hd])] if sink is not None else []))
                den = sum(math.exp(x - mx) for x in s) + (math.exp(float(sink[hd]) - mx) if sink is not None else 0)
                o = sum((math.exp(x - mx) / den) * vv for x, (_, vv) in zip(s, keys))
                out[i, hd * c.d:(hd + 1) * c.d] = o
        return out @ dr.W(f"layers.{l}.self_attn.o_proj.weight").t()

    def test_attention_matches_scalar_loops(self):
        _, _, tg, dcfg, dt = make_pair("dspark", seed=9, window=5)
        dsw = dref.Drafter(dcfg, dt, tg)
        cases = [(dsw, "dspark W=5"), (self.ds, "dspark W=1024"), (self.df, "dflash")]
        g = torch.Generator().manual_seed(4)
        for dr, name in cases:
            ctx = dr.context(self.seq)
            p, Q = 9, 4
            h = torch.randn(Q, dr.cfg.H, generator=g, dtype=torch.float64)
            for l in range(dr.cfg.L):
                ctx_l = (ctx[l][0][:p], ctx[l][1][:p])
                a = dr.attention(l, h, list(range(p, p + Q)), p, ctx_l)
                b = self._loop_attention(dr, l, h, p, ctx_l)
                self.assertLess(rel_err(a, b), 1e-12, f"{name} layer {l}")

    def test_window_visibility(self):
        W = 6
        _, _, tg, dcfg, dt = make_pair("dspark", seed=11, window=W)
        dr = dref.Drafter(dcfg, dt, tg)
        p, k = 20, 3
        f = dr.taps(self.seq)
        _, b, _ = dr.draft(self.seq[p], p, k, dr.context_kv(dr.fuse(f)))
        f1 = f.clone()
        f1[:p - W + 1] = 0                                  # rows j <= p-W: outside every row's window
        _, b1, _ = dr.draft(self.seq[p], p, k, dr.context_kv(dr.fuse(f1)))
        self.assertLess(rel_err(b1, b), 1e-13)
        f2 = f.clone()
        f2[p - W + 1] = 0                                   # row p-W+1: visible to block row 0
        _, b2, _ = dr.draft(self.seq[p], p, k, dr.context_kv(dr.fuse(f2)))
        self.assertGreater(rel_err(b2, b), 1e-6)
        vis = dr.visible(0, p, 4, p)
        self.assertEqual(vis[0, :p].nonzero().flatten().tolist(), list(range(p - W + 1, p)))
        self.assertEqual(vis[3, :p].nonzero().flatten().tolist(), list(range(p + 3 - W + 1, p)))
        self.assertEqual(vis[1, p:].tolist(), [True, True, False, False])

    def test_sink_semantics(self):
        dt = dict(self.dt_ds)
        for l in range(self.ds.cfg.L):
            dt[f"layers.{l}.self_attn.attention_sink_bias"] = torch.full((self.ds.cfg.nH,), -1e30)
        d_nosink_w = dref.Drafter(self.dcfg_ds, dt, self.target)
        d_nosink_v = dref.Drafter(self.dcfg_ds, self.dt_ds, self.target, variants=["no_sink"])
        p = 8
        _, a, _ = d_nosink_w.draft(self.seq[p], p, 3, self.ctx_ds)
        _, b, _ = d_nosink_v.draft(self.seq[p], p, 3, self.ctx_ds)
        _, s, _ = self.ds.draft(self.seq[p], p, 3, self.ctx_ds)
        self.assertLess(rel_err(a, b), 1e-13)          # sink -> -inf == no sink column
        self.assertGreater(rel_err(s, b), 1e-3)        # the sinks matter

    def test_markov_chain_and_drafts(self):
        p = 14
        k = 5
        forced = rand_tokens(k, seed=7)
        _, base, final = self.ds.draft(self.seq[p], p, k, self.ctx_ds, forced=forced)
        W1 = self.dt_ds["markov_head.markov_w1.weight"].double()
        W2 = self.dt_ds["markov_head.markov_w2.weight"].double()
        prevs = [self.seq[p]] + forced[:-1]
        for i in range(k):
            self.assertLess(rel_err(final[i], base[i] + W2 @ W1[prevs[i]]), 1e-13)
        self.assertLess(rel_err(self.ds.final_logits(base, self.seq[p], forced), final), 1e-15)
        drafts, base2, final2 = self.ds.draft(self.seq[p], p, k, self.ctx_ds)
        self.assertEqual(rel_err(base2, base), 0.0)
        prev = self.seq[p]
        for i in range(k):
            row = base[i] + W2 @ W1[prev]
            self.assertEqual(drafts[i], int(torch.argmax(row)))
            prev = drafts[i]
        # DFlash: final == base, drafts = argmax base
        drafts, b, f = self.df.draft(self.seq[p], p, k, self.ctx_df)
        self.assertEqual(float((b - f).abs().max()), 0.0)
        self.assertEqual(drafts, [int(torch.argmax(b[i])) for i in range(k)])

    def test_block_embeddings_and_mask_token(self):
        # anchor row 0 uses embed_tokens[anchor], rows >= 1 embed_tokens[mask]; target_embed variant differs
        p = 6
        dv = dref.Drafter(self.dcfg_ds, self.dt_ds, self.target, variants=["target_embed"])
        _, b, _ = self.ds.draft(self.seq[p], p, 3, self.ctx_ds)
        _, bv, _ = dv.draft(self.seq[p], p, 3, self.ctx_ds)
        self.assertGreater(rel_err(bv, b), 1e-3)
        dt = dict(self.dt_ds)
        dt.pop("embed_tokens.weight")
        cfg = dict(self.dcfg_ds, has_embed_tokens=False)
        dn = dref.Drafter(cfg, dt, self.target)
        _, bn, _ = dn.draft(self.seq[p], p, 3, dn.context(self.seq))
        self.assertLess(rel_err(bn, bv), 1e-15)

    def test_loader_model_prefix_and_disk(self):
        with tempfile.TemporaryDirectory() as td:
            with open(os.path.join(td, "config.json"), "w") as f:
                json.dump(self.dcfg_ds, f)
            nref.write_safetensors(os.path.join(td, "model.safetensors"),
                                   {"model." + k: v for k, v in self.dt_ds.items()})
            cfg, tens = dref.load_drafter(td)
            dr = dref.Drafter(cfg, tens, self.target)
            p = 9
            _, a, fa = dr.draft(self.seq[p], p, 4, dr.context(self.seq))
            _, b, fb = self.ds.draft(self.seq[p], p, 4, self.ctx_ds)
            self.assertEqual(rel_err(a, b), 0.0)
            self.assertEqual(rel_err(fa, fb), 0.0)

    def test_variants_are_visible(self):
        """Every deliberately wrong variant that applies changes the logits by far more than the oracle bound, so
        the round trip below can reject it and the diagnosis can name it."""
        W = 6
        _, _, tg, dcfg, dt = make_pair("dspark", seed=13, window=W)
        dsw = dref.Drafter(dcfg, dt, tg)
        applicable = {k: dref.Drafter.variants_for(k) for k in ("dspark", "dflash")}
        self.assertNotIn("no_sink", applicable["dflash"])
        self.assertNotIn("no_mscale", applicable["dspark"])
        p, k = 20, 4
        for base_dr, (cfg, tens) in ((dsw, (dcfg, dt)), (self.df, (self.dcfg_df, self.dt_df))):
            kind = base_dr.cfg.kind
            ctx = base_dr.context(self.seq)
            _, b0, f0 = base_dr.draft(self.seq[p], p, k, ctx, forced=self.seq[p + 1:p + 1 + k])
            for var in applicable[kind]:
                dv = dref.Drafter(cfg, tens, base_dr.target, variants=[var])
                _, bv, fv = dv.draft(self.seq[p], p, k, dv.context(self.seq), forced=self.seq[p + 1:p + 1 + k])
                e = max(rel_err(bv, b0), rel_err(fv, f0))
                self.assertGreater(e, 1e-3, f"{kind} variant {var} is invisible ({e:.1e})")

    # -- C++-free round trip of the oracle comparison ------------------------------------------------------------

    def test_roundtrip_accepts_own_dump_and_rejects_broken(self):
        import run_drafter_oracle as rdo
        prompt = self.seq[:7]
        n_gen = 12
        for dr, cfg, tens in ((self.ds, self.dcfg_ds, self.dt_ds), (self.df, self.dcfg_df, self.dt_df)):
            gamma = 3
            with tempfile.TemporaryDirectory() as td:
                pre = os.path.join(td, "x")
                res = dref.spec_greedy(dr.target, dr, prompt, n_gen, gamma)
                nref.write_dump(pre, prompt, res["tokens"], 97, res["prefill"], res["decode"])
                dref.write_draft_dump(pre, dr.cfg.kind, gamma, 97, dr.cfg.taps, res["rounds"], res["base"],
                                      res["final"])
                meta, bases, finals = dref.read_draft_dump(pre)

                def check(m, b, f, drafter=dr):
                    case = rdo.Case("x")
                    r = rdo.check_draft_dump(case, drafter, prompt, res["tokens"], m, b, f, gamma)
                    return case, r
                case, r = check(meta, bases, finals)
                self.assertTrue(case.ok, "\n".join(case.lines))
                self.assertLess(r["base_err"], 1e-6)         # f32 rounding of the written rows only
                self.assertEqual(r["rounds"], len(res["rounds"]))
                # perturbed base row
                b2 = [x.copy() for x in bases]
                b2[1][0, 5] += 1e-3 * np.abs(b2[1][0]).max()
                self.assertFalse(check(meta, b2, finals)[0].ok, "perturbed base accepted")
                # a wrong draft token
                m2 = json.loads(json.dumps(meta))
                m2["rounds"][2]["drafts"][0] = (m2["rounds"][2]["drafts"][0] + 1) % 97
                self.assertFalse(check(m2, bases, finals)[0].ok, "wrong draft accepted")
                # wrong p chain / anchor / q_rows / kind
                for mut in ("p", "anchor", "q_rows", "kind", "gamma"):
                    m3 = json.loads(json.dumps(meta))
                    if mut == "kind":
                        m3["kind"] = "dflash" if dr.cfg.kind == "dspark" else "dspark"
                    elif mut == "gamma":
                        m3["gamma"] = gamma + 1
                    else:
                        m3["rounds"][1][mut] += 1
                    self.assertFalse(check(m3, bases, finals)[0].ok, f"mutated {mut} accepted")
                # a missing round
                m4 = json.loads(json.dumps(meta))
                del m4["rounds"][1]
                self.assertFalse(check(m4, bases[:1] + bases[2:], finals[:1] + finals[2:])[0].ok,
                                 "missing round accepted")
                # dumps made by deliberately wrong drafters are rejected
                wrong = ["last_tap_postnorm", "block_pos_shift", "no_qk_norm"] + (
                    ["no_sink", "markov_skip_first", "block_bidirectional"] if dr.cfg.kind == "dspark"
                    else ["no_mscale", "block_causal"])
                for var in wrong:
                    dv = dref.Drafter(cfg, tens, dr.target, variants=[var])
                    rv = dref.spec_greedy(dr.target, dv, prompt, n_gen, gamma)
                    pv = os.path.join(td, "v_" + var)
                    dref.write_draft_dump(pv, dv.cfg.kind, gamma, 97, dv.cfg.taps, rv["rounds"], rv["base"],
                                          rv["final"])
                    mv, bv, fv = dref.read_draft_dump(pv)
                    cv, _ = check(mv, bv, fv)
                    self.assertFalse(cv.ok, f"{dr.cfg.kind}: dump of wrong variant {var} accepted")
                    # ... and the diagnosis names it
                    if var in ("no_sink", "no_mscale"):
                        rdo.diagnose(cv, cfg, tens, dr.target, prompt, res["tokens"], mv, bv, fv, gamma, 1.0)
                        self.assertTrue(any(f"'{var}'" in ln for ln in cv.lines), "\n".join(cv.lines))

    def test_roundtrip_with_accepted_drafts(self):
        """A DSpark Markov head rewritten into a bigram table of the target's greedy output: drafts get accepted,
        the p chain advances by more than one, and the comparison still accepts the reference's own dump."""
        import run_drafter_oracle as rdo
        prompt = self.seq[:6]
        n_gen = 20
        _, toks, _ = nref.greedy(self.target, prompt, n_gen)
        full = prompt + toks
        dt = dict(self.dt_ds)
        r = int(self.ds.cfg.markov_rank)
        W1 = torch.zeros(97, r)
        W2 = torch.zeros(97, r)
        table = {}
        for a, b in zip(full[:-1], full[1:]):
            table.setdefault(a, b)
        for slot, (a, b) in enumerate(sorted(table.items())[:r]):
            W1[a, slot] = 20.0
            W2[b if slot % 3 else (b + 1) % 97, slot] = 1.0        # every 3rd entry wrong
        dt["markov_head.markov_w1.weight"] = W1
        dt["markov_head.markov_w2.weight"] = W2
        dr = dref.Drafter(self.dcfg_ds, dt, self.target)
        res = dref.spec_greedy(self.target, dr, prompt, n_gen, 4)
        steps = [b["p"] - a["p"] for a, b in zip(res["rounds"], res["rounds"][1:])]
        self.assertGreater(max(steps), 2, steps)
        self.assertIn(1, steps)
        with tempfile.TemporaryDirectory() as td:
            pre = os.path.join(td, "x")
            dref.write_draft_dump(pre, "dspark", 4, 97, dr.cfg.taps, res["rounds"], res["base"], res["final"])
            meta, bases, finals = dref.read_draft_dump(pre)
        case = rdo.Case("acc")
        out = rdo.check_draft_dump(case, dr, prompt, res["tokens"], meta, bases, finals, 4)
        self.assertTrue(case.ok, "\n".join(case.lines))
        self.assertGreaterEqual(out["accepted"], sum(s - 1 for s in steps))     # last round adds its own
        self.assertGreater(out["accepted"], 5)

    def test_cli_writes_contract_files(self):
        import run_drafter_oracle as rdo
        with tempfile.TemporaryDirectory() as td:
            tdir, ddir = os.path.join(td, "t"), os.path.join(td, "d")
            os.makedirs(tdir)
            os.makedirs(ddir)
            with open(os.path.join(tdir, "config.json"), "w") as f:
                json.dump(self.tcfg, f)
            nref.write_safetensors(os.path.join(tdir, "model.safetensors"), self.tt)
            with open(os.path.join(ddir, "config.json"), "w") as f:
                json.dump(self.dcfg_ds, f)
            nref.write_safetensors(os.path.join(ddir, "model.safetensors"), self.dt_ds)
            pre = os.path.join(td, "o")
            prompt = self.seq[:5]
            import contextlib
            import io
            with contextlib.redirect_stdout(io.StringIO()):
                rc = dref.main(["--model", tdir, "--draft", ddir, "--ids", ",".join(map(str, prompt)), "--gen", "9",
                                "--out", pre, "--draft-max", "7"])
            self.assertEqual(rc, 0)
            meta, pre_rows, dec_rows = nref.read_dump(pre)
            dm, b, f = dref.read_draft_dump(pre)
            self.assertEqual((dm["kind"], dm["gamma"], dm["vocab"], dm["tap_layers"]), ("dspark", 7, 97, [1, 3, 5]))
            self.assertEqual(dm["rounds"][0]["p"], 5)
            self.assertTrue(all(r["q_rows"] == len(r["drafts"]) + 1 for r in dm["rounds"]))
            case = rdo.Case("cli")
            rdo.check_draft_dump(case, self.ds, prompt, meta["tokens"], dm, b, f, 7)
            self.assertTrue(case.ok, "\n".join(case.lines))


def run(verbosity=1):
    """Run the suite; returns (n_run, n_failed_or_errored, text report)."""
    import io
    buf = io.StringIO()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(DrafterSelfCheck)
    res = unittest.TextTestRunner(stream=buf, verbosity=verbosity).run(suite)
    return res.testsRun, len(res.failures) + len(res.errors), buf.getvalue()


if __name__ == "__main__":
    unittest.main()
