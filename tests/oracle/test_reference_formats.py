#!/usr/bin/python3
"""Unit tests of the oracle's independent dequantizers (tools/reference/nemotron_formats.py) against the byte-exact
test vectors of shared/spec/formats.md §7, plus the safetensors reader on unaligned (MLX-style) files and the
logical-name mapping of ModelOpt / MLX checkpoints. No C++ engine needed.

    /usr/bin/python3 tests/oracle/test_reference_formats.py [-v]
(run_oracle.py runs these first.)
"""
import json
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import nemotron_formats as fm  # noqa: E402


def f32_from_bits(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def bits_of(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def bf16_rne_bits(a):
    """float32 -> bf16 bits, round to nearest even (inputs here are finite)."""
    u = bits_of(a).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return r.astype(np.uint16)


def bf16_to_f32(bits16):
    return (np.asarray(bits16, dtype=np.uint32) << 16).view(np.float32)


def hexbytes(s):
    return np.frombuffer(bytes.fromhex(s.replace(" ", "")), dtype=np.uint8)


def write_st(path, tensors, pad=False, order=None, odd=False):
    """Tiny safetensors writer for tests: tensors = {name: (dtype str, shape, bytes)}; no header padding unless
    pad (MLX writes an unpadded header, so data offsets can be odd); odd: force the data section to start at a
    file offset = 1 mod 4."""
    header, blobs, off = {}, [], 0
    for name in (order or list(tensors)):
        dt, shape, data = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "mlx"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    while odd and (8 + len(hb)) % 4 != 1:
        header["__metadata__"]["x"] = header["__metadata__"].get("x", "") + "x"
        hb = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    return 8 + len(hb)


# ----------------------------------------------------------------------------------------------------------
# own simple quantizers (to build test checkpoints; written from formats.md §2.6 / §5.2)
# ----------------------------------------------------------------------------------------------------------

def quant_nvfp4(w):
    """Max/dynamic ModelOpt-style: ws2 = amax/2688; per 16-block s = E4M3(amax_b/(6 ws2)); codes RNE on the grid."""
    w = np.asarray(w, np.float32)
    o, i = w.shape
    ws2 = np.float32(np.abs(w).max() / 2688.0)
    blk = w.reshape(o, i // 16, 16)
    am = np.abs(blk).max(axis=2) / (6.0 * ws2)
    am = np.where(am == 0, 1.0, am)
    s = fm.e4m3_encode_rne(np.clip(am, 2.0 ** -9, 448.0))
    codes_s = np.array([list(fm.E4M3_TABLE[:0x7F]).index(v) for v in s.reshape(-1)], np.uint8).reshape(s.shape)
    x = blk / (s[:, :, None] * ws2)
    grid = fm.E2M1_TABLE[:8]
    idx = np.abs(np.abs(x)[..., None] - grid).argmin(axis=-1).astype(np.uint8)
    codes = np.where(x < 0, idx | 8, idx).reshape(o, i).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, codes_s, ws2


def quant_affine(w, bits, group):
    """MLX CPU affine quantizer formats.md §5.2 on float32 input; returns (U32 words, scales f32 (bf16-representable), biases)."""
    w = np.asarray(w, np.float32)
    n = (1 << bits) - 1
    g = w.reshape(w.shape[:-1] + (w.shape[-1] // group, group))
    wmax, wmin = g.max(-1), g.min(-1)
    scale = np.maximum((wmax - wmin) / n, 1e-7).astype(np.float32)
    neg = np.abs(wmin) > np.abs(wmax)
    edge = np.where(neg, wmin, wmax)
    scale = np.where(neg, scale, -scale)
    q0 = np.rint(edge / scale)
    scale = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scale).astype(np.float32)
    bias = np.where(q0 != 0, edge, 0).astype(np.float32)
    q = np.clip(np.rint((g - bias[..., None]) / scale[..., None]), 0, n).astype(np.uint32)
    q = q.reshape(w.shape)
    per = 32 // bits
    qw = q.reshape(q.shape[:-1] + (q.shape[-1] // per, per))
    words = np.zeros(qw.shape[:-1], np.uint32)
    for k in range(per):
        words |= qw[..., k] << np.uint32(k * bits)
    return words, bf16_to_f32(bf16_rne_bits(scale)), bf16_to_f32(bf16_rne_bits(bias))


def bf16_bytes(a):
    return bf16_rne_bits(np.asarray(a, np.float32)).astype("<u2").tobytes()


# ----------------------------------------------------------------------------------------------------------

class FormatVectors(unittest.TestCase):
    # formats.md §7.1
    def test_e2m1_table_by_bits(self):
        self.assertEqual(fm.E2M1_TABLE.tolist(), [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
        self.assertTrue(np.signbit(fm.E2M1_TABLE[8]))

    def test_e2m1_packing(self):
        cases = {0x00: (0, 0), 0x21: (0.5, 1.0), 0x10: (0, 0.5), 0xF7: (6.0, -6.0), 0x8A: (-1.0, -0.0),
                 0x5B: (-1.5, 3.0), 0xC4: (2.0, -2.0)}
        for byte, (lo, hi) in cases.items():
            v = fm.e2m1_decode(np.array([[byte]], np.uint8))[0]
            self.assertEqual(v.tolist(), [lo, hi], hex(byte))
        v = fm.e2m1_decode(hexbytes("10 32 54 76 98 BA DC FE")[None])[0]
        self.assertEqual(v.tolist(), [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])

    # formats.md §7.2
    def test_e4m3_decode(self):
        tv = {0x00: 0.0, 0x01: 0.001953125, 0x07: 0.013671875, 0x08: 0.015625, 0x26: 0.21875, 0x30: 0.5,
              0x38: 1.0, 0x3C: 1.5, 0x40: 2.0, 0x44: 3.0, 0x48: 4.0, 0x2A: 0.3125, 0x18: 0.0625, 0x4C: 6.0,
              0x50: 8.0, 0x66: 56.0, 0x70: 128.0, 0x77: 240.0, 0x78: 256.0, 0x7E: 448.0, 0x80: -0.0,
              0xB8: -1.0, 0xC4: -3.0, 0xFE: -448.0}
        for b, v in tv.items():
            got = fm.e4m3_decode(np.array([b], np.uint8))[0]
            self.assertEqual(float(got), v, hex(b))
            self.assertEqual(bool(np.signbit(got)), b >= 0x80, hex(b))
        self.assertTrue(np.isnan(fm.E4M3_TABLE[0x7F]) and np.isnan(fm.E4M3_TABLE[0xFF]))
        self.assertEqual(int(np.isnan(fm.E4M3_TABLE).sum()), 2)   # no Inf, only two NaN codes
        self.assertFalse(np.isinf(fm.E4M3_TABLE).any())
        for bad in (0x7F, 0xFF):
            with self.assertRaises(ValueError):
                fm.e4m3_decode(np.array([0x38, bad], np.uint8))

    def test_e4m3_encode_rne(self):
        tv = [(1.0625, 0x38), (1.1875, 0x3A), (0.3, 0x2A), (2.0 ** -10, 0x00), (3 * 2.0 ** -10, 0x02),
              (600.0, 0x7E), (-600.0, 0xFE), (448.0, 0x7E), (-1.0, 0xB8)]
        for x, b in tv:
            self.assertEqual(float(fm.e4m3_encode_rne(np.array([x]))[0]), float(fm.E4M3_TABLE[b]), x)
        # every finite code round-trips
        vals = fm.E4M3_TABLE[~np.isnan(fm.E4M3_TABLE)]
        self.assertTrue(np.array_equal(fm.e4m3_encode_rne(vals), vals))

    # formats.md §7.3
    def test_tv_nvfp4_1(self):
        w = hexbytes("10 32 54 76 98 BA DC FE 7F 00 21 A9 4C E7 18 5B")[None]
        sc = hexbytes("3C 26")[None]
        ws2 = f32_from_bits([0x3B23D70A])[0]
        exp = [0x00000000, 0x3AF5C28F, 0x3B75C28F, 0x3BB851EB, 0x3BF5C28F, 0x3C3851EB, 0x3C75C28F, 0x3CB851EB,
               0x80000000, 0xBAF5C28F, 0xBB75C28F, 0xBBB851EB, 0xBBF5C28F, 0xBC3851EB, 0xBC75C28F, 0xBCB851EB,
               0xBB570A3E, 0x3B570A3E, 0x00000000, 0x00000000, 0x398F5C29, 0x3A0F5C29, 0xB98F5C29, 0xBA0F5C29,
               0xBA8F5C29, 0x3A8F5C29, 0x3B570A3E, 0xBB0F5C29, 0x80000000, 0x398F5C29, 0xBA570A3E, 0x3AD70A3E]
        exp_bf16 = [0x0000, 0x3AF6, 0x3B76, 0x3BB8, 0x3BF6, 0x3C38, 0x3C76, 0x3CB8, 0x8000, 0xBAF6, 0xBB76,
                    0xBBB8, 0xBBF6, 0xBC38, 0xBC76, 0xBCB8, 0xBB57, 0x3B57, 0x0000, 0x0000, 0x398F, 0x3A0F,
                    0xB98F, 0xBA0F, 0xBA8F, 0x3A8F, 0x3B57, 0xBB0F, 0x8000, 0x398F, 0xBA57, 0x3AD7]
        got = fm.nvfp4_dequant(w, sc, ws2)
        self.assertEqual(got.shape, (1, 32))
        # canonical order s = E4M3*ws2 then E2M1*s: bit-exact incl. the sign of zero (sign-aware LUT)
        self.assertEqual([int(x) for x in bits_of(got[0])], exp)
        self.assertEqual([int(x) for x in bf16_rne_bits(got[0])], exp_bf16)
        bs = fm.e4m3_decode(sc[0]) * ws2
        self.assertEqual([int(x) for x in bits_of(bs)], [0x3B75C28F, 0x3A0F5C29])

    def test_nvfp4_shape_errors(self):
        with self.assertRaises(ValueError):
            fm.nvfp4_dequant(np.zeros((2, 8), np.uint8), np.zeros((2, 2), np.uint8), 1.0)   # in=16 -> 1 block
        with self.assertRaises(ValueError):
            fm.nvfp4_dequant(np.zeros((1, 8), np.uint8), np.array([[0x7F]], np.uint8), 1.0)  # NaN scale

    # formats.md §7.4
    TV2_W = "60 B6 CA 84 F5 97 94 3B 94 49 ED C2 CF EB 0E 95 1A 92 71 A8 11 B2 A9 0C C4 56 34 E5 44 2F 5A 8B"
    TV2_F32 = """00000000 3CC30C31 3CC30C31 BC124925 BBC30C31 BC430C31 3C430C31 80000000
3C924925 BD124925 3D124925 BB430C31 3C430C31 BB430C31 BC124925 3C124925
3C5B6DB7 BB5B6DB7 BB5B6DB7 3C5B6DB7 BCA49249 BCDB6DB7 3BDB6DB7 BC5B6DB7
BD249249 BC5B6DB7 BC249249 BCDB6DB7 BCDB6DB7 00000000 3CA49249 BB5B6DB7
BC924925 3C124925 3C924925 BC124925 3C124925 3DDB6DB8 80000000 BC924925
3C124925 3C124925 3C924925 BCDB6DB8 BC124925 BC924925 BD124925 00000000
3C430C31 BC430C31 3CC30C31 3C924925 3C430C31 3C124925 3C924925 BCC30C31
3C430C31 3C430C31 BD124925 3BC30C31 BBC30C31 3C924925 BC124925 80000000"""
    TV2_Q = [11, 9, 9, 12, 12, 12, 10, 11, 9, 15, 7, 11, 10, 11, 12, 10, 10, 11, 11, 10, 13, 14, 10, 12, 15, 12,
             12, 14, 14, 11, 9, 11, 13, 10, 9, 12, 10, 0, 11, 13, 10, 10, 9, 14, 12, 13, 15, 11, 10, 12, 9, 9, 10,
             10, 9, 13, 10, 10, 15, 10, 12, 9, 12, 11]
    TV2_WORDS = [0xBACCC99B, 0xACBAB7F9, 0xCAEDABBA, 0xB9BEECCF, 0xDB0AC9AD, 0xBFDCE9AA, 0xD9AA99CA, 0xBC9CAFAA]

    def test_tv_nvfp4_2_and_mlx_requant(self):
        w = hexbytes(self.TV2_W)[None]
        sc = hexbytes("68 69 74 68")[None]
        self.assertEqual(fm.e4m3_decode(sc[0]).tolist(), [64, 72, 192, 64])
        ws2 = f32_from_bits([0x38C30C31])[0]
        got = fm.nvfp4_dequant(w, sc, ws2)[0]
        exp = [int(x, 16) for x in self.TV2_F32.split()]
        self.assertEqual([int(x) for x in bits_of(got)], exp)
        codes = fm.e2m1_decode(w)[0]
        self.assertEqual(codes[:4].tolist(), [0.0, 4.0, 4.0, -1.5])     # codes 0 6 6 B
        # MLX affine-4 g64 of the same group: unpack the words, dequantize with the stored BF16 scale/bias
        q = fm.mlx_unpack(np.array([self.TV2_WORDS], np.uint32), 4)[0]
        self.assertEqual(q.tolist(), self.TV2_Q)
        s = bf16_to_f32([0xBC1F])
        b = bf16_to_f32([0x3DDB])
        self.assertEqual(float(s[0]), -0.00970458984375)
        self.assertEqual(float(b[0]), 0.10693359375)
        deq = fm.mlx_affine_dequant(np.array([self.TV2_WORDS], np.uint32), s[None], b[None], 4, 64)[0]
        bf = bf16_to_f32(bf16_rne_bits(got))
        err = deq.astype(np.float64) - bf
        self.assertAlmostEqual(float(np.abs(err).max()), 0.00458, delta=0.00001)
        self.assertAlmostEqual(float(np.linalg.norm(err) / np.linalg.norm(bf)), 0.110, delta=0.0015)
        # code 11 is the zero point: bias + 11*scale ~ 0
        self.assertLess(abs(float(b[0] + 11 * s[0])), 1e-3)
        # our own quantizer (formats.md §5.2) reproduces the stored words, scale and bias
        words, s2, b2 = quant_affine(bf[None], 4, 64)
        self.assertEqual([int(x) for x in words[0]], self.TV2_WORDS)
        self.assertEqual(int(bf16_rne_bits(s2)[0, 0]), 0xBC1F)
        self.assertEqual(int(bf16_rne_bits(b2)[0, 0]), 0x3DDB)

    # formats.md §7.5
    def test_tv_fp8(self):
        w = hexbytes("38 C4 26 7E 01 80 4C B8")
        ws = f32_from_bits([0x3C4CCCCD])[0]
        got = fm.fp8_dequant(w, ws)
        self.assertEqual([int(x) for x in bits_of(got)],
                         [0x3C4CCCCD, 0xBD19999A, 0x3B333333, 0x40B33333, 0x37CCCCCD, 0x80000000, 0x3D99999A,
                          0xBC4CCCCD])
        s = f32_from_bits([0x3D4CCCCD])[0]
        x = np.array([1.0, -3.3, 22.4, 30.0, 0.0001], np.float32)
        xq = fm.e4m3_encode_rne(x / s)
        self.assertEqual(xq.tolist(), [fm.E4M3_TABLE[b] for b in (0x5A, 0xE8, 0x7E, 0x7E, 0x01)])
        xd = xq * s
        np.testing.assert_allclose(xd, [1.0, -3.2, 22.4, 22.4, 9.765625e-5], rtol=1e-6)

    # formats.md §7.6
    def test_tv_mlx_1(self):
        words = np.array([[0x76543210, 0xFEDCBA98] * 4], np.uint32)
        self.assertEqual(words.astype("<u4").tobytes()[:4], bytes([0x10, 0x32, 0x54, 0x76]))
        q = fm.mlx_unpack(words, 4)[0]
        self.assertEqual(q.tolist(), [i % 16 for i in range(64)])
        s = bf16_to_f32([[0xBE00]])
        b = bf16_to_f32([[0x3F80]])
        deq = fm.mlx_affine_dequant(words, s, b, 4, 64)[0]
        self.assertEqual(deq.tolist(), [1.0 - 0.125 * (i % 16) for i in range(64)])
        wq, s2, b2 = quant_affine(np.array([[1.0 - 0.125 * (i % 16) for i in range(64)]], np.float32), 4, 64)
        self.assertTrue(np.array_equal(wq, words))

    TV_MLX2_IN = """37CE 3BC4 BBB4 BC92 BC15 BCA2 3A9E 3CDC BC21 BC4B 3C21 3BEA 3B0A BC98 BA19 3C64
BCDC BC16 BD1C BCD3 BD17 BB9A BCD0 3BB2 3B4D BB75 BD4E BC31 BA7E 3B15 BCFB BC1D
BCA0 BC85 3CAE BC84 BA2B 3C91 BC3F BB12 3B11 3AA7 BCC9 3AC8 3CDF BCFD 3C8D 3B1C
BC52 3D24 3C7A BCC4 3AC3 3C3D BB77 3C60 BAAE 3C5B 3CEC BC5D 3B85 BC18 3B27 BCC3"""
    TV_MLX2_Q = [8, 9, 7, 5, 7, 5, 8, 12, 6, 6, 10, 9, 8, 5, 8, 10, 4, 7, 2, 4, 2, 7, 4, 9, 8, 7, 0, 6, 8, 8, 3, 6,
                 5, 5, 11, 5, 8, 11, 6, 8, 8, 8, 4, 8, 12, 3, 11, 8, 6, 14, 10, 4, 8, 10, 7, 10, 8, 10, 13, 6, 9, 7,
                 8, 4]
    TV_MLX2_WORDS = [0xC8575798, 0xA8589A66, 0x94724274, 0x63886078, 0x86B85B55, 0x8B3C8488, 0xA7A84AE6,
                     0x48796DA8]

    def test_tv_mlx_2(self):
        x = bf16_to_f32([int(v, 16) for v in self.TV_MLX2_IN.split()])
        self.assertEqual(float(x.min()), -0.05029296875)
        self.assertEqual(float(x.max()), 0.0400390625)
        words = np.array([self.TV_MLX2_WORDS], np.uint32)
        self.assertEqual(fm.mlx_unpack(words, 4)[0].tolist(), self.TV_MLX2_Q)
        s = bf16_to_f32([[0x3BCE]])
        b = bf16_to_f32([[0xBD4E]])
        self.assertEqual(float(s[0, 0]), 0.00628662109375)
        deq = fm.mlx_affine_dequant(words, s, b, 4, 64)[0]
        self.assertLessEqual(float(np.abs(deq - x).max()), float(s[0, 0]) / 2 + 1e-7)
        self.assertEqual(float(deq[26]), -0.05029296875)          # q = 0 -> bias (the exact extreme)
        wq, s2, b2 = quant_affine(x[None], 4, 64)
        self.assertEqual([int(v) for v in wq[0]], self.TV_MLX2_WORDS)
        self.assertEqual(int(bf16_rne_bits(s2)[0, 0]), 0x3BCE)
        self.assertEqual(int(bf16_rne_bits(b2)[0, 0]), 0xBD4E)

    def test_mlx_8bit_and_stacked(self):
        words = np.array([[0x04030201, 0xFF80007F]], np.uint32)
        self.assertEqual(fm.mlx_unpack(words, 8)[0].tolist(), [1, 2, 3, 4, 0x7F, 0, 0x80, 0xFF])
        rng = np.random.default_rng(5)
        w = (rng.standard_normal((3, 5, 128)) * 0.02).astype(np.float32)   # stacked [E, out, in]
        for bits, tol in ((4, 0.15), (8, 0.012)):
            wq, s, b = quant_affine(w, bits, 64)
            self.assertEqual(wq.shape, (3, 5, 128 * bits // 32))
            deq = fm.mlx_affine_dequant(wq, s, b, bits, 64)
            self.assertEqual(deq.shape, w.shape)
            rel = np.linalg.norm(deq - w) / np.linalg.norm(w)
            self.assertLess(rel, tol, bits)
            for e in range(3):   # per-expert slices == dequantizing each expert alone
                self.assertTrue(np.array_equal(deq[e], fm.mlx_affine_dequant(wq[e], s[e], b[e], bits, 64)))
        with self.assertRaises(ValueError):
            fm.mlx_affine_dequant(wq, s[..., :1], b[..., :1], 8, 64)

    def test_own_nvfp4_quantizer_error(self):
        rng = np.random.default_rng(1)
        w = rng.standard_normal((64, 256)).astype(np.float32)
        p, s, ws2 = quant_nvfp4(w)
        d = fm.nvfp4_dequant(p, s, ws2)
        rel = np.linalg.norm(d - w) / np.linalg.norm(w)
        self.assertGreater(rel, 0.07)
        self.assertLess(rel, 0.12)     # formats.md §6.4: ~9.5 % on Gaussian data
        self.assertLessEqual(float(np.abs(d).max()), 6 * 448 * ws2 * (1 + 1e-6))


class Readers(unittest.TestCase):
    def test_unaligned_safetensors(self):
        d = tempfile.mkdtemp(prefix="oracle-fmt-")
        p = os.path.join(d, "x.safetensors")
        bf = np.array([1.5, -2.25, 3.0], np.float32)
        words = np.array([0x76543210, 0xFEDCBA98], "<u4")
        f32 = np.array([0.1, 0.2], "<f4")
        t = {"a.odd": ("U8", [3], b"\x01\x02\x03"),     # makes every later tensor misaligned
             "b.bf16": ("BF16", [3], bf16_bytes(bf)),
             "c.u32": ("U32", [1, 2], words.tobytes()),
             "d.f32": ("F32", [2], f32.tobytes()),
             "e.scalar": ("F32", [], np.array([7.5], "<f4").tobytes())}
        base = write_st(p, t)
        raw, meta = fm.read_safetensors_raw(p)
        self.assertEqual(meta, {"format": "mlx"})
        self.assertNotEqual((base + 3) % 2, 0)   # BF16 data really is at an odd file offset
        self.assertEqual(raw["b.bf16"].floats().tolist(), bf.tolist())
        self.assertEqual(raw["c.u32"].u32().tolist(), [[0x76543210, 0xFEDCBA98]])
        self.assertEqual(raw["d.f32"].floats().tolist(), f32.tolist())
        self.assertEqual(float(raw["e.scalar"].scalar()), 7.5)
        # formats.md §1.1 validation: hole / bad length / trailing bytes
        with open(p, "ab") as f:
            f.write(b"\0")
        with self.assertRaises(ValueError):
            fm.read_safetensors_raw(p)
        t2 = dict(t)
        t2["a.odd"] = ("U8", [4], b"\x01\x02\x03")
        write_st(p, t2)
        with self.assertRaises(ValueError):
            fm.read_safetensors_raw(p)

    def _tiny_parts(self, rng):
        W = {"backbone.layers.0.mixer.in_proj": rng.standard_normal((64, 128)).astype(np.float32) * 0.1,
             "backbone.layers.1.mixer.experts.0.up_proj": rng.standard_normal((64, 128)).astype(np.float32),
             "backbone.layers.1.mixer.experts.1.up_proj": rng.standard_normal((64, 128)).astype(np.float32),
             "backbone.layers.1.mixer.experts.0.down_proj": rng.standard_normal((128, 64)).astype(np.float32),
             "backbone.layers.1.mixer.experts.1.down_proj": rng.standard_normal((128, 64)).astype(np.float32)}
        conv = rng.standard_normal((16, 1, 4)).astype(np.float32)
        gate = rng.standard_normal((2, 128)).astype(np.float32)
        return W, conv, gate

    def test_modelopt_checkpoint(self):
        rng = np.random.default_rng(2)
        W, conv, gate = self._tiny_parts(rng)
        d = tempfile.mkdtemp(prefix="oracle-mo-")
        t, ql = {}, {}
        for mod, w in W.items():
            if "in_proj" in mod:
                ws = np.float32(np.abs(w).max() / 448.0)
                q = fm.e4m3_encode_rne(w / ws)
                codes = np.array([list(fm.E4M3_TABLE[:0x7F]).index(abs(v)) | (0x80 if v < 0 or
                                  (v == 0 and np.signbit(v)) else 0) for v in q.reshape(-1)], np.uint8)
                t[mod + ".weight"] = ("F8_E4M3", list(w.shape), codes.tobytes())
                t[mod + ".weight_scale"] = ("F32", [], np.array([ws], "<f4").tobytes())
                t[mod + ".input_scale"] = ("F32", [], np.array([0.05], "<f4").tobytes())
                ql[mod] = {"quant_algo": "FP8"}
            else:
                p, s, ws2 = quant_nvfp4(w)
                t[mod + ".weight"] = ("U8", list(p.shape), p.tobytes())
                t[mod + ".weight_scale"] = ("F8_E4M3", list(s.shape), s.tobytes())
                t[mod + ".weight_scale_2"] = ("F32", [], np.array([ws2], "<f4").tobytes())
                ql[mod] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
        t["backbone.layers.0.mixer.conv1d.weight"] = ("BF16", [16, 1, 4], bf16_bytes(conv))
        t["backbone.layers.1.mixer.gate.weight"] = ("F32", [2, 128], gate.astype("<f4").tobytes())
        t["backbone.layers.1.mixer.k_proj.k_scale"] = ("F32", [], np.array([1.0], "<f4").tobytes())
        write_st(os.path.join(d, "model.safetensors"), t, pad=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "nemotron_h"}, f)
        with open(os.path.join(d, "hf_quant_config.json"), "w") as f:
            json.dump({"producer": {"name": "modelopt"}, "quantization": {
                "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8", "quantized_layers": ql,
                "exclude_modules": ["backbone.layers.0.mixer.conv1d", "backbone.layers.1.mixer.gate", "mtp*"]}}, f)
        cfg, out, info = fm.load_logical(d)
        for mod, w in W.items():
            rel = np.linalg.norm(out[mod + ".weight"] - w) / np.linalg.norm(w)
            self.assertLess(rel, 0.035 if "in_proj" in mod else 0.12, mod)
        ip = "backbone.layers.0.mixer.in_proj.weight"
        self.assertEqual(info[ip]["format"], "fp8")
        self.assertAlmostEqual(float(info[ip]["input_scale"]), 0.05, places=7)
        self.assertEqual(info["backbone.layers.1.mixer.experts.1.down_proj.weight"]["format"], "nvfp4")
        self.assertEqual(out["backbone.layers.0.mixer.conv1d.weight"].shape, (16, 1, 4))
        self.assertTrue(np.array_equal(out["backbone.layers.1.mixer.gate.weight"], gate))
        self.assertNotIn("backbone.layers.1.mixer.k_proj.k_scale", out)
        # the same information only in config.json quantization_config (converted form, §4.3) also works
        with open(os.path.join(d, "hf_quant_config.json")) as f:
            q = json.load(f)["quantization"]
        os.remove(os.path.join(d, "hf_quant_config.json"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "nemotron_h", "quantization_config": {
                "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": ql,
                "ignore": q["exclude_modules"]}}, f)
        cfg2, out2, info2 = fm.load_logical(d)
        self.assertEqual(sorted(out2), sorted(out))
        for k in out:
            self.assertTrue(np.array_equal(out2[k], out[k]), k)
        # a quantized module missing from the config is an error, not a guess
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "nemotron_h"}, f)
        with open(os.path.join(d, "hf_quant_config.json"), "w") as f:
            ql.pop("backbone.layers.0.mixer.in_proj")
            json.dump({"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": ql}}, f)
        with self.assertRaises(ValueError):
            fm.load_logical(d)

    def test_mlx_checkpoint(self):
        rng = np.random.default_rng(3)
        W, conv, gate = self._tiny_parts(rng)
        d = tempfile.mkdtemp(prefix="oracle-mlx-")
        t = {}

        def put(mod, w, bits):
            q, s, b = quant_affine(w, bits, 64)
            t[mod + ".weight"] = ("U32", list(q.shape), q.astype("<u4").tobytes())
            t[mod + ".scales"] = ("BF16", list(s.shape), bf16_bytes(s))
            t[mod + ".biases"] = ("BF16", list(b.shape), bf16_bytes(b))

        put("backbone.layers.0.mixer.in_proj", W["backbone.layers.0.mixer.in_proj"], 8)
        p = "backbone.layers.1.mixer."
        put(p + "switch_mlp.fc1", np.stack([W[p + "experts.0.up_proj"], W[p + "experts.1.up_proj"]]), 4)
        put(p + "switch_mlp.fc2", np.stack([W[p + "experts.0.down_proj"], W[p + "experts.1.down_proj"]]), 4)
        t["backbone.layers.0.mixer.conv1d.weight"] = ("BF16", [16, 4, 1], bf16_bytes(conv.transpose(0, 2, 1)))
        t[p + "gate.weight"] = ("BF16", [2, 128], bf16_bytes(gate))
        write_st(os.path.join(d, "model.safetensors"), t, odd=True)   # unaligned data everywhere
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "nemotron_h",
                       "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
                                        "backbone.layers.0.mixer.in_proj": {"group_size": 64, "bits": 8}}}, f)
        cfg, out, info = fm.load_logical(d)
        for mod, w in W.items():
            rel = np.linalg.norm(out[mod + ".weight"] - w) / np.linalg.norm(w)
            self.assertLess(rel, 0.012 if "in_proj" in mod else 0.13, mod)
        self.assertEqual(info[p + "experts.1.down_proj.weight"]["format"], "mlx4")
        self.assertEqual(info["backbone.layers.0.mixer.in_proj.weight"]["format"], "mlx8")
        self.assertNotIn(p + "switch_mlp.fc1.weight", out)
        cw = out["backbone.layers.0.mixer.conv1d.weight"]
        self.assertEqual(cw.shape, (16, 1, 4))
        self.assertTrue(np.array_equal(cw, bf16_to_f32(bf16_rne_bits(conv))))
        self.assertEqual(out[p + "gate.weight"].dtype, np.float32)


class Fp8StaticMode(unittest.TestCase):
    def test_w8a8_linear_tv(self):
        """formats.md §7.5 numbers through the reference's W8A8 linear: x_q = E4M3(clamp(x/s)), y = (x_q.W_q) * s * ws."""
        import torch
        import nemotron_ref as ref
        wq = fm.e4m3_decode(hexbytes("38 C4 26 7E 01"))[None]          # [1, 5]
        ws = float(f32_from_bits([0x3C4CCCCD])[0])
        xs = float(f32_from_bits([0x3D4CCCCD])[0])
        m = object.__new__(ref.NemotronH)
        m.fp8 = {"l.weight": (torch.from_numpy(wq), ws, xs)}
        m.fp8_stats = {}
        m.bf16_act = frozenset()
        m.t = {"l.weight": torch.from_numpy(wq * np.float32(ws))}
        x = torch.tensor([[1.0, -3.3, 22.4, 30.0, 0.0001]], dtype=torch.float32)
        y = float(m.lin(x, "l.weight")[0, 0])
        xd = np.array([1.0, -3.2, 22.4, 22.4, 9.765625e-5])
        self.assertAlmostEqual(y, float(xd @ (wq[0].astype(np.float64) * ws)), delta=1e-6 * abs(y))
        self.assertEqual(m.fp8_stats["l.weight"], [5, 1])               # 30/0.05 = 600 was clamped
        y16 = float((x @ m.t["l.weight"].t())[0, 0])                     # W8A16: activations untouched
        self.assertGreater(abs(y - y16), 1e-3 * abs(y16))

    def test_bf16_activation_linear_tv(self):
        """The bf16-activation mode (engine --arith bf16, docs/FORMATS.md 2.1) through the reference's linear: inputs
        rounded to bf16 to nearest even, |x| < 2^-100 -> +0; hand-computed values."""
        import torch
        import nemotron_ref as ref
        x = np.array([1 / 3, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8 + 2 ** -20), 2 ** -101, -(2 ** -99),
                      65504.0], dtype=np.float32)
        want = [0.333984375,    # 0x3EAB: 1/3 = 0x3EAAAAAB rounds up
                1.0,            # tie, to even (mantissa 0000000)
                1.015625,       # tie between 1+2^-7 (odd) and 1+2^-6 (even)
                -1.0078125,     # just above the tie: away from zero
                0.0,            # below 2^-100: flushed
                -(2 ** -99),    # above it: exact, kept
                65536.0]        # 0x477FE0 -> 0x4780 (mantissa carry into the exponent)
        got = ref.round_bf16_activation(torch.from_numpy(x)).numpy()
        self.assertEqual(got.tolist(), want)
        m = object.__new__(ref.NemotronH)
        m.fp8, m.fp8_stats, m.bf16_act = {}, {}, frozenset({"l.weight"})
        w = np.array([[1.0, 2.0, 4.0, -8.0, 1.0, 1.0, 0.5]], dtype=np.float32)
        m.t = {"l.weight": torch.from_numpy(w)}
        y = float(m.lin(torch.from_numpy(x)[None], "l.weight")[0, 0])
        exact = float(np.dot(np.array(want, np.float64), w[0].astype(np.float64)))
        self.assertAlmostEqual(y, exact, delta=2 ** -23 * 4 * abs(exact))  # a few f32 roundings of the sum
        m.bf16_act = frozenset()                                        # the f32 mode leaves x alone
        self.assertNotEqual(float(m.lin(torch.from_numpy(x)[None], "l.weight")[0, 0]), y)

    def test_bf16_act_names(self):
        """Which modules the bf16-activation mode rounds: NVFP4, FP8 and bf16, but not FP8 run as W8A8 (static),
        f16 or f32 modules, or a MoE router."""
        import nemotron_ref as ref
        info = {"a.weight": {"format": "nvfp4"}, "b.weight": {"format": "fp8", "input_scale": 0.5},
                "c.weight": {"format": "fp8"}, "d.weight": {"format": "bf16"}, "e.weight": {},
                "f.weight": {"format": "f16"}, "backbone.layers.1.mixer.gate.weight": {"format": "bf16"}}
        self.assertEqual(ref.bf16_act_names_from_info(info), {"a.weight", "b.weight", "c.weight", "d.weight"})
        self.assertEqual(ref.bf16_act_names_from_info(info, fp8_static=True), {"a.weight", "c.weight", "d.weight"})


def run(verbosity=1):
    """Run the suite; returns (n_run, n_failed_or_errored, text report)."""
    import io
    buf = io.StringIO()
    loader = unittest.defaultTestLoader
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in (FormatVectors, Readers, Fp8StaticMode)])
    res = unittest.TextTestRunner(stream=buf, verbosity=verbosity).run(suite)
    return res.testsRun, len(res.failures) + len(res.errors), buf.getvalue()


if __name__ == "__main__":
    unittest.main()
