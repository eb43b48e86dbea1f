// Engine-core properties promised bit-for-bit: verify width, batching and thread count (1-4,
// also more threads than rows) never change a row's logits, and accept() after a recorded verify
// leaves exactly the decode state — on every weight format and KV-cache dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "../support/targets.h"
#include "../support/temp_dir.h"
#include "base/error.h"
#include "base/numeric.h"
#include "base/random.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"
#include "model/nemotron_h.h"
#include "tools/synth/synth.h"

using namespace nemo;
using model::ForwardOptions;
using model::NemotronH;

namespace {

using test::Target;

// The synthetic checkpoints are written with seed 7.
NemotronH& model_for(const Target& t) {
  return test::load_target(t, 7);
}
NemotronH& model_for(const std::string& preset, io::DType dt) {
  return model_for({.preset = preset, .dtype = dt});
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = int32_t(r.next() % uint64_t(vocab));
  return v;
}

// max |a - ref| and max |ref| over two logit buffers of the same size.
struct LogitGap {
  double max_abs = 0, max_ref = 0;
};
LogitGap logit_gap(const Buffer<float>& a, const Buffer<float>& ref) {
  LogitGap g;
  for (size_t i = 0; i < ref.size(); ++i) {
    g.max_abs = std::max(g.max_abs, double(std::fabs(a[i] - ref[i])));
    g.max_ref = std::max(g.max_ref, double(std::fabs(ref[i])));
  }
  return g;
}

bool bits_equal(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;  // memcmp(null, null, 0) is UB
}

class ModelProps : public testing::TestWithParam<Target> {};

}  // namespace

TEST_P(ModelProps, VerifyRowsBitwiseEqualDecode) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size;
  const auto prompt = random_tokens(5, V, 1);
  // 20 rows: widths past 16 take the MoE's one-expert-at-a-time path (moe.cpp kGroupRows) and
  // NVFP4's wide kernels; a recorded pass never takes the chunked scan, so all stay bitwise.
  constexpr int64_t kRows = 20;
  const auto rows = random_tokens(kRows, V, 2);
  std::vector<float> dec1;  // the decode rows with one thread
  // 3 and 4 threads: more threads than a 1- or 2-row pass has rows.
  for (int threads : {1, 2, 3, 4}) {
    ThreadConfig tc{threads};
    // Reference: one row at a time (decode).
    auto st = m.new_state();
    m.forward(st, prompt, {}, tc);
    std::vector<float> dec;
    for (auto t : rows) {
      const int32_t in[1] = {t};
      auto r = m.forward(st, in, {}, tc);
      dec.insert(dec.end(), r.logits.data(), r.logits.data() + V);
    }
    if (threads == 1) dec1 = dec;
    ASSERT_TRUE(bits_equal(dec.data(), dec1.data(), dec.size()))
        << "decode rows, threads " << threads;
    for (int64_t width : {1, 2, 3, 7, 8, 16, 20}) {
      auto s2 = m.new_state();
      m.forward(s2, prompt, {}, tc);
      ForwardOptions fo;
      fo.all_logits = true;
      fo.record = true;
      for (int64_t at = 0; at < kRows; at += width) {
        const int64_t w = std::min<int64_t>(width, kRows - at);
        auto r =
            m.forward(s2, std::span<const int32_t>(rows).subspan(size_t(at), size_t(w)), fo, tc);
        ASSERT_EQ(r.rows, w);
        for (int64_t i = 0; i < w; ++i)
          ASSERT_TRUE(bits_equal(r.logits.data() + i * V, dec.data() + (at + i) * V, size_t(V)))
              << "width " << width << " row " << at + i << " threads " << threads;
      }
    }
  }
}

TEST_P(ModelProps, ThreadCountNeverChangesBits) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size;
  const auto prompt = random_tokens(150, V, 3);  // long enough for the chunked SSD path
  const auto next = random_tokens(3, V, 11);
  ForwardOptions fo;
  fo.all_logits = true;
  // Per thread count: the prefill's logits and states, then a 1-row decode and a 2-row recorded
  // verify (fewer rows than threads) and their state.
  struct Run {
    std::vector<float> logits;
    model::SequenceState st;
  };
  auto run = [&](int threads) {
    const ThreadConfig tc{threads};
    Run r{{}, m.new_state()};
    auto add = [&](const model::ForwardResult& f) {
      r.logits.insert(r.logits.end(), f.logits.data(), f.logits.data() + f.logits.size());
    };
    add(m.forward(r.st, prompt, fo, tc));
    add(m.forward(r.st, std::span<const int32_t>(next).first(1), fo, tc));
    ForwardOptions verify = fo;
    verify.record = true;
    add(m.forward(r.st, std::span<const int32_t>(next).subspan(1), verify, tc));
    m.accept(r.st, 1, tc);
    return r;
  };
  const Run one = run(1);
  ASSERT_EQ(one.logits.size(), size_t((150 + 1 + 2) * V));
  for (int threads : {2, 3, 4}) {
    const Run r = run(threads);
    ASSERT_EQ(r.logits.size(), one.logits.size());
    EXPECT_TRUE(bits_equal(r.logits.data(), one.logits.data(), one.logits.size()))
        << "threads " << threads;
    ASSERT_EQ(r.st.n_past(), one.st.n_past());
    for (size_t i = 0; i < one.st.mamba_.size(); ++i) {
      EXPECT_TRUE(bits_equal(r.st.mamba_[i].ssm.data(), one.st.mamba_[i].ssm.data(),
                             one.st.mamba_[i].ssm.size()))
          << "ssm layer slot " << i << " threads " << threads;
      EXPECT_TRUE(bits_equal(r.st.mamba_[i].conv.data(), one.st.mamba_[i].conv.data(),
                             one.st.mamba_[i].conv.size()))
          << "conv layer slot " << i << " threads " << threads;
    }
  }
}

TEST_P(ModelProps, AcceptAfterVerifyEqualsDecodeState) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size;
  ThreadConfig tc{2};
  const auto prompt = random_tokens(9, V, 4);
  const auto draft = random_tokens(8, V, 5);
  const auto next = random_tokens(3, V, 6);
  for (int64_t keep = 1; keep <= 8; ++keep) {
    // Plain decode of the kept rows.
    auto a = m.new_state();
    m.forward(a, prompt, {}, tc);
    for (int64_t i = 0; i < keep; ++i) {
      const int32_t in[1] = {draft[i]};
      m.forward(a, in, {}, tc);
    }
    // Verify all 8, keep `keep`.
    auto b = m.new_state();
    m.forward(b, prompt, {}, tc);
    ForwardOptions fo;
    fo.all_logits = true;
    fo.record = true;
    m.forward(b, draft, fo, tc);
    m.accept(b, keep, tc);
    ASSERT_EQ(a.n_past(), b.n_past());
    for (size_t i = 0; i < a.mamba_.size(); ++i) {
      ASSERT_TRUE(
          bits_equal(a.mamba_[i].ssm.data(), b.mamba_[i].ssm.data(), a.mamba_[i].ssm.size()))
          << "ssm layer slot " << i << " keep " << keep;
      ASSERT_TRUE(
          bits_equal(a.mamba_[i].conv.data(), b.mamba_[i].conv.data(), a.mamba_[i].conv.size()))
          << "conv layer slot " << i << " keep " << keep;
    }
    // And the continuation is bitwise the same (KV truncation included).
    fo.record = false;
    auto ra = m.forward(a, next, fo, tc);
    auto rb = m.forward(b, next, fo, tc);
    ASSERT_TRUE(bits_equal(ra.logits.data(), rb.logits.data(), ra.logits.size()))
        << "keep " << keep;
  }
}

TEST_P(ModelProps, ChunkedPrefillMatchesRecurrence) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size;
  const auto prompt = random_tokens(140, V, 8);  // crosses the 128-row chunk boundary
  ForwardOptions ssd, rec;
  ssd.all_logits = rec.all_logits = true;
  rec.ssd_min_rows = 1 << 30;
  auto s1 = m.new_state(), s2 = m.new_state();
  auto r1 = m.forward(s1, prompt, ssd, ThreadConfig{2});
  auto r2 = m.forward(s2, prompt, rec, ThreadConfig{2});
  ASSERT_EQ(r1.logits.size(), r2.logits.size());
  const auto [max_abs, max_ref] = logit_gap(r1.logits, r2.logits);
  // With bf16 activations the Mamba out_proj rounds the scan's output to bf16, so where the two
  // forms differ in the last f32 bits an element may land on the other bf16 neighbour: one bf16
  // step (2^-8) then bounds the gap (measured 7.9e-4 on tiny-q ModelOpt).
  const double tol = GetParam().arith == kernels::Arith::Bf16 ? 0x1p-8 : 1e-4;
  EXPECT_LE(max_abs / max_ref, tol);
  EXPECT_GT(max_ref, 0.0);
  // The two forms are not expected to agree bitwise; make sure the SSD path actually ran. Its
  // trace is in the f32 SSM states: quantized activations (W8A8: y is rounded to FP8 before
  // out_proj) can round it away before the logits.
  if (m.config().count(io::LayerKind::Mamba) > 0) {
    bool differ = false;
    for (size_t i = 0; i < s1.mamba_.size(); ++i)
      differ |=
          !bits_equal(s1.mamba_[i].ssm.data(), s2.mamba_[i].ssm.data(), s1.mamba_[i].ssm.size());
    EXPECT_TRUE(differ) << "the chunked scan left the recurrence's SSM states bit for bit";
  }
}

// Continuous batching: sequences in different phases (prefill long enough for the chunked scan,
// decode rows, recorded verify rows with taps and hidden states) share one pass, and each gets
// bitwise what it gets alone — logits, hidden, taps, and the state it leaves behind.
TEST_P(ModelProps, BatchedSequencesBitwiseEqualAlone) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size, NL = int64_t(m.config().layers.size());
  const std::vector<int64_t> taps{NL - 1, 0};  // out of order on purpose
  struct Case {
    int64_t past;  // rows prefilled before the batched step (0 = the step is a prefill)
    int64_t rows;  // rows of the batched step
    bool record, taps, hidden, all;
  };
  const std::vector<std::vector<Case>> batches{
      {{7, 1, false, false, false, false},
       {0, 40, false, true, false, true},  // chunked-scan prefill
       {12, 4, true, true, true, true},    // verify, rolled back below
       {3, 1, false, false, true, true},
       {25, 16, true, false, false, true}},
      // two rows: fewer than 3 or 4 threads
      {{7, 1, false, true, false, false}, {3, 1, true, false, true, true}}};
  for (int run = 0; run < 8; ++run) {  // each batch with 1, 2, 3 and 4 threads
    const std::vector<Case>& cases = batches[size_t(run / 4)];
    const int threads = 1 + run % 4;
    const ThreadConfig tc{threads};
    std::vector<model::SequenceState> alone, batched;
    std::vector<std::vector<int32_t>> rows;
    std::vector<ForwardOptions> opts;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      alone.push_back(m.new_state());
      batched.push_back(m.new_state());
      if (k.past) {
        const auto p = random_tokens(k.past, V, 100 + i);
        m.forward(alone.back(), p, {}, tc);
        m.forward(batched.back(), p, {}, tc);
      }
      rows.push_back(random_tokens(k.rows, V, 200 + i));
      ForwardOptions o;
      o.record = k.record;
      o.all_logits = k.all;
      o.want_hidden = k.hidden;
      if (k.taps) o.taps = taps;
      opts.push_back(o);
    }
    std::vector<model::BatchItem> items;
    for (size_t i = 0; i < cases.size(); ++i) items.push_back({&batched[i], rows[i], opts[i]});
    const auto got = m.forward_batch(items, tc);
    ASSERT_EQ(got.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("batch of " + std::to_string(cases.size()) + ", sequence " + std::to_string(i) +
                   ", threads " + std::to_string(threads));
      const auto want = m.forward(alone[i], rows[i], opts[i], tc);
      ASSERT_EQ(got[i].rows, want.rows);
      ASSERT_EQ(got[i].logits.size(), size_t(want.rows * V));
      EXPECT_TRUE(bits_equal(got[i].logits.data(), want.logits.data(), want.logits.size()));
      ASSERT_EQ(got[i].hidden.size(), want.hidden.size());
      EXPECT_TRUE(bits_equal(got[i].hidden.data(), want.hidden.data(), want.hidden.size()));
      ASSERT_EQ(got[i].taps.size(), want.taps.size());
      EXPECT_TRUE(bits_equal(got[i].taps.data(), want.taps.data(), want.taps.size()));
      if (cases[i].record) {  // keep a prefix: the rollback must agree too
        m.accept(alone[i], std::min<int64_t>(2, cases[i].rows), tc);
        m.accept(batched[i], std::min<int64_t>(2, cases[i].rows), tc);
      }
      // The states left behind: the next decode row agrees bitwise.
      const auto next = random_tokens(1, V, 300 + i);
      const auto a = m.forward(alone[i], next, {}, tc), b = m.forward(batched[i], next, {}, tc);
      EXPECT_EQ(alone[i].n_past(), batched[i].n_past());
      EXPECT_TRUE(bits_equal(a.logits.data(), b.logits.data(), size_t(V)));
    }
  }
}

// Prefix reuse: a prefill cut at a multiple of the SSD chunk size and resumed with the chunked
// scan (ssd_min_rows = 1) is bitwise the one-piece prefill — logits of every row and the state.
TEST_P(ModelProps, PrefillSplitAtChunkBoundaryIsExact) {
  NemotronH& m = model_for(GetParam());
  const int64_t V = m.config().vocab_size, Q = m.config().chunk_size;
  for (int64_t n : {Q + 5, 2 * Q + 1}) {
    const auto prompt = random_tokens(n, V, 9);
    ForwardOptions all;
    all.all_logits = true;
    auto whole = m.new_state(), split = m.new_state();
    const auto rw = m.forward(whole, prompt, all, ThreadConfig{2});
    std::vector<float> got;
    for (int64_t at = 0; at < n; at += Q) {
      ForwardOptions o = all;
      o.ssd_min_rows = 1;
      const auto piece =
          std::span<const int32_t>(prompt).subspan(size_t(at), size_t(std::min(Q, n - at)));
      const auto r = m.forward(split, piece, o, ThreadConfig{2});
      got.insert(got.end(), r.logits.data(), r.logits.data() + r.logits.size());
    }
    ASSERT_EQ(got.size(), rw.logits.size());
    EXPECT_TRUE(bits_equal(got.data(), rw.logits.data(), got.size())) << "n = " << n;
    const auto next = random_tokens(1, V, 10);
    const auto a = m.forward(whole, next, {}, ThreadConfig{1}),
               b = m.forward(split, next, {}, ThreadConfig{1});
    EXPECT_TRUE(bits_equal(a.logits.data(), b.logits.data(), size_t(V))) << "n = " << n;
  }
}

// The case is what its name says: a rounding KV cache, W8A8 or bf16 activations change the logits
// of the same checkpoint (a case that silently loaded the plain model would pass every test above).
TEST_P(ModelProps, LoadOptionsTakeEffect) {
  const Target& p = GetParam();
  NemotronH& m = model_for(p);
  const auto& c = m.config();
  EXPECT_EQ(m.new_state().kv_bytes_per_token(),
            size_t(c.count(io::LayerKind::Attention) * 2 * c.num_key_value_heads * c.head_dim *
                   model::kv_dtype_bytes(p.kv)));
  if (p.kv == model::KvDtype::F32 && !p.w8a8 && p.arith == kernels::Arith::F32) return;
  Target plain = p;
  plain.kv = model::KvDtype::F32;
  plain.w8a8 = false;
  plain.arith = kernels::Arith::F32;
  NemotronH& ref = model_for(plain);
  const auto prompt = random_tokens(20, c.vocab_size, 12);
  ForwardOptions fo;
  fo.all_logits = true;
  auto a = m.new_state(), b = ref.new_state();
  const auto ra = m.forward(a, prompt, fo, ThreadConfig{1}),
             rb = ref.forward(b, prompt, fo, ThreadConfig{1});
  ASSERT_EQ(ra.logits.size(), rb.logits.size());
  EXPECT_FALSE(bits_equal(ra.logits.data(), rb.logits.data(), ra.logits.size()));
}

INSTANTIATE_TEST_SUITE_P(Tiny, ModelProps,
                         testing::Values(Target{.preset = "tiny-a", .dtype = io::DType::F32},
                                         Target{.preset = "tiny-a", .dtype = io::DType::BF16},
                                         Target{.preset = "tiny-b", .dtype = io::DType::BF16},
                                         Target{.preset = "tiny-b", .dtype = io::DType::F16},
                                         Target{.preset = "tiny-c", .dtype = io::DType::F32},
                                         Target{.preset = "tiny-c", .dtype = io::DType::BF16}),
                         test::target_name);

// Every quantized format and KV-cache dtype keeps the same promises: its arithmetic differs from
// the dense model's, but a row's result is still one function of the row. tiny-q in each format
// with each cache, and the dense presets with the rounding caches.
std::vector<Target> format_targets() {
  std::vector<Target> v = test::quantized_targets();
  v.push_back({.preset = "tiny-a", .dtype = io::DType::F32, .kv = model::KvDtype::BF16});
  v.push_back({.preset = "tiny-a", .dtype = io::DType::F32, .kv = model::KvDtype::FP8});
  v.push_back({.preset = "tiny-b", .dtype = io::DType::BF16, .kv = model::KvDtype::FP8});
  v.push_back({.preset = "tiny-c", .dtype = io::DType::BF16, .kv = model::KvDtype::BF16});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Formats, ModelProps, testing::ValuesIn(format_targets()),
                         test::target_name);

TEST(ModelState, MemoryIsAccounted) {
  NemotronH& m = model_for("tiny-b", io::DType::BF16);
  auto st = m.new_state();
  const auto& c = m.config();
  const size_t mamba = size_t(c.count(io::LayerKind::Mamba)) *
                       size_t((c.conv_kernel - 1) * c.conv_dim() +
                              c.mamba_num_heads * c.mamba_head_dim * c.ssm_state_size) *
                       4;
  EXPECT_EQ(st.fixed_bytes(), mamba);
  EXPECT_EQ(st.kv_bytes_per_token(),
            size_t(c.count(io::LayerKind::Attention) * 2 * c.num_key_value_heads * c.head_dim * 4));
  const int32_t t[3] = {1, 2, 3};
  m.forward(st, t, {}, ThreadConfig{1});
  EXPECT_GE(st.bytes(), st.fixed_bytes() + 3 * st.kv_bytes_per_token());
}

// bytes_read (bench's verify floor): shared weights once, each routed expert once.
TEST(ModelBytes, PassReadsSharedWeightsOnceAndTheUnionOfExperts) {
  NemotronH& m = model_for("tiny-b", io::DType::BF16);
  const auto& c = m.config();
  const size_t L = c.layers.size();
  const std::vector<std::vector<uint8_t>> none(L);
  const int64_t b0 = m.bytes_read(none);
  std::vector<std::vector<uint8_t>> one(L);
  int64_t n_moe = 0;
  for (size_t l = 0; l < L; ++l)
    if (c.layers[l] == io::LayerKind::MoE) one[l] = {1}, ++n_moe;
  ASSERT_GT(n_moe, 0);
  const int64_t per_expert = (m.bytes_read(one) - b0) / n_moe;  // experts share one shape
  ASSERT_GT(per_expert, 0);
  EXPECT_EQ(m.bytes_read({}), b0 + n_moe * c.num_experts_per_tok * per_expert);
  EXPECT_EQ(m.bytes_read({}), m.decode_bytes_per_token());
  for (int64_t rows : {1, 4}) {
    auto st = m.new_state();
    model::ForwardProfile prof;
    ForwardOptions fo;
    fo.profile = &prof;
    m.forward(st, random_tokens(rows, c.vocab_size, 3), fo, ThreadConfig{1});
    int64_t used = 0, moe_layers = 0;
    for (size_t l = 0; l < prof.experts_used.size(); ++l) {
      int64_t u = 0;
      for (uint8_t x : prof.experts_used[l]) u += x;
      if (c.layers[l] != io::LayerKind::MoE) continue;
      ++moe_layers;
      EXPECT_GE(u, c.num_experts_per_tok) << "layer " << l;
      EXPECT_LE(u, std::min<int64_t>(c.n_routed_experts, rows * c.num_experts_per_tok));
      used += u;
    }
    EXPECT_EQ(moe_layers, n_moe);
    EXPECT_EQ(m.bytes_read(prof.experts_used), b0 + used * per_expert) << rows << " rows";
    if (rows > 1) {
      EXPECT_GT(used, n_moe * c.num_experts_per_tok);  // the union grew
    }
  }
}

// matmul_macs_per_row (bench's compute floor) against the shapes the config implies: lm_head,
// Mamba in/out_proj, attention q/k/v/o, MLP up/down, the router, top-k experts and the shared
// experts; the same per row whatever the routing.
TEST(ModelBytes, MatmulMacsPerRowAreTheConfigsShapes) {
  for (const char* preset : {"tiny-a", "tiny-c"}) {
    NemotronH& m = model_for(preset, io::DType::BF16);
    const auto& c = m.config();
    const int64_t H = c.hidden_size;
    int64_t want = c.vocab_size * H;
    for (io::LayerKind k : c.layers) switch (k) {
        case io::LayerKind::Mamba:
          want += H * c.in_proj_dim() + c.mamba_inner() * H;
          break;
        case io::LayerKind::Attention:
          want += 2 * H * c.num_attention_heads * c.head_dim +
                  2 * H * c.num_key_value_heads * c.head_dim;
          break;
        case io::LayerKind::MLP:
          want += 2 * H * c.intermediate_size;
          break;
        case io::LayerKind::MoE:
          want += H * c.n_routed_experts + c.num_experts_per_tok * 2 * H * c.moe_intermediate_size +
                  c.n_shared_experts * 2 * H * c.moe_shared_expert_intermediate_size;
          break;
      }
    EXPECT_EQ(m.matmul_macs_per_row(), want) << preset;
    std::vector<std::vector<uint8_t>> all(c.layers.size(),
                                          std::vector<uint8_t>(size_t(c.n_routed_experts), 1));
    int64_t sum = 0, bytes = 0;
    for (const auto& mc : m.matmul_costs(all)) sum += mc.macs_per_row, bytes += mc.bytes;
    EXPECT_EQ(sum, want) << preset;
    EXPECT_LT(bytes, m.bytes_read(all)) << preset;  // + one embedding row and the norms
  }
}

TEST(ModelErrors, BadTokensAndAcceptMisuse) {
  NemotronH& m = model_for("tiny-a", io::DType::BF16);
  auto st = m.new_state();
  const int32_t bad[2] = {1, int32_t(m.config().vocab_size)};
  EXPECT_THROW(m.forward(st, bad, {}, ThreadConfig{1}), Error);
  const int32_t neg[1] = {-3};
  EXPECT_THROW(m.forward(st, neg, {}, ThreadConfig{1}), Error);
  const int32_t ok[2] = {1, 2};
  m.forward(st, ok, {}, ThreadConfig{1});
  EXPECT_THROW(m.accept(st, 1, ThreadConfig{1}), Error);  // not recorded
  ForwardOptions fo;
  fo.record = true;
  m.forward(st, ok, fo, ThreadConfig{1});
  EXPECT_THROW(m.accept(st, 3, ThreadConfig{1}), Error);
  EXPECT_THROW(m.accept(st, 0, ThreadConfig{1}), Error);
}

namespace {
std::string load_error(const std::string& dir) {
  try {
    NemotronH::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites a checkpoint with one tensor changed by `edit` (which may drop it by returning false).
void rewrite(const std::string& src, const std::string& dst,
             const std::function<bool(std::string&, io::DType&, std::vector<int64_t>&,
                                      std::vector<uint8_t>&)>& edit) {
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src + "/config.json", dst + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto st = io::TensorStore::open_dir(src);
  struct T {
    std::string name;
    io::DType dt;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> ts;
  for (const auto& n : st.names()) {
    const auto& v = st.get(n);
    T t{n, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)};
    if (edit(t.name, t.dt, t.shape, t.bytes)) ts.push_back(std::move(t));
  }
  io::SafetensorsWriter w(dst + "/model.safetensors");
  for (auto& t : ts) w.declare(t.name, t.dt, t.shape);
  w.begin();
  for (auto& t : ts) w.write(t.bytes);
  w.finish();
}
}  // namespace

TEST(ModelErrors, BadCheckpointsNameTheTensor) {
  test::TempDir src, dst;
  synth::SynthOptions o;
  synth::write_checkpoint(synth::preset_config("tiny-a"), src.path(), o);
  const std::string victim = "backbone.layers.0.mixer.in_proj.weight";
  // Missing tensor
  rewrite(src.path(), dst.path(), [&](auto& n, auto&, auto&, auto&) { return n != victim; });
  EXPECT_NE(load_error(dst.path()).find("missing tensor '" + victim + "'"), std::string::npos);
  // Wrong shape
  rewrite(src.path(), dst.path(), [&](auto& n, auto&, auto& shape, auto& bytes) {
    if (n == victim) {
      shape[0] -= 1;
      bytes.resize(bytes.size() - size_t(shape[1]) * 2);
    }
    return true;
  });
  const std::string module = "backbone.layers.0.mixer.in_proj";
  EXPECT_NE(load_error(dst.path()).find("module '" + module + "' has logical shape"),
            std::string::npos)
      << load_error(dst.path());
  // Wrong dtype for a dense layer without a quantization config
  rewrite(src.path(), dst.path(), [&](auto& n, auto& dt, auto& shape, auto& bytes) {
    if (n == victim) {
      dt = io::DType::U8;
      shape[1] *= 2;
    }
    return true;
  });
  EXPECT_NE(load_error(dst.path()).find(module), std::string::npos) << load_error(dst.path());
  // Malformed config
  std::ofstream(dst.path() + "/config.json") << "{\"model_type\": \"nemotron_h\", ";
  EXPECT_NE(load_error(dst.path()).find("config.json: malformed JSON"), std::string::npos);
  // No checkpoint at all
  test::TempDir empty;
  EXPECT_NE(load_error(empty.path()).find("config.json"), std::string::npos);
}

TEST(ModelKvCache, Bf16AndFp8CachesStayBatchInvariantAndClose) {
  test::TempDir d;
  synth::SynthOptions o;
  o.seed = 9;
  o.format = synth::SynthFormat::ModelOpt;  // carries k_scale / v_scale
  synth::write_checkpoint(synth::preset_config("tiny-q"), d.path(), o);
  auto ref = NemotronH::load(d.path());
  const auto prompt = random_tokens(20, ref->config().vocab_size, 10);
  ForwardOptions fo;
  fo.all_logits = true;
  auto s0 = ref->new_state();
  auto r0 = ref->forward(s0, prompt, fo, ThreadConfig{1});
  for (auto kv : {model::KvDtype::BF16, model::KvDtype::FP8}) {
    auto m = NemotronH::load(d.path(), {.kv_dtype = kv});
    const int64_t V = m->config().vocab_size;
    auto st = m->new_state();
    EXPECT_EQ(st.kv_bytes_per_token() * 4,
              s0.kv_bytes_per_token() * size_t(model::kv_dtype_bytes(kv)));
    auto r = m->forward(st, prompt, fo, ThreadConfig{2});
    ASSERT_EQ(r.logits.size(), r0.logits.size());
    const auto [max_abs, max_ref] = logit_gap(r.logits, r0.logits);
    EXPECT_GT(max_abs, 0.0) << model::kv_dtype_name(kv) << " cache must actually round";
    if (kv == model::KvDtype::BF16) {
      EXPECT_LT(max_abs / max_ref, 2e-2);
    } else {  // 3 mantissa bits: the logits stay strongly correlated with the exact ones
      double dot = 0, n0 = 0, n1 = 0;
      for (size_t i = 0; i < r.logits.size(); ++i) {
        dot += double(r.logits[i]) * r0.logits[i];
        n0 += double(r0.logits[i]) * r0.logits[i];
        n1 += double(r.logits[i]) * r.logits[i];
      }
      EXPECT_GT(dot / std::sqrt(n0 * n1), 0.95);
    }
    // Verify rows still equal decode rows bit for bit.
    auto a = m->new_state(), b = m->new_state();
    m->forward(a, std::span<const int32_t>(prompt).first(10), {}, ThreadConfig{1});
    m->forward(b, std::span<const int32_t>(prompt).first(10), {}, ThreadConfig{1});
    auto rv = m->forward(b, std::span<const int32_t>(prompt).subspan(10), fo, ThreadConfig{2});
    for (int64_t i = 0; i < 10; ++i) {
      auto rd = m->forward(a, std::span<const int32_t>(prompt).subspan(size_t(10 + i), 1), {},
                           ThreadConfig{1});
      ASSERT_TRUE(bits_equal(rd.logits.data(), rv.logits.data() + i * V, size_t(V)))
          << model::kv_dtype_name(kv);
    }
  }
  EXPECT_THROW(model::parse_kv_dtype("int4"), Error);
}

TEST(ModelKvCache, StoreLoadRoundTrip) {
  const float x[6] = {0.0f, 1.0f, -3.3f, 1e-6f, 500.0f, -0.07f};
  for (auto dt : {model::KvDtype::F32, model::KvDtype::BF16, model::KvDtype::FP8}) {
    model::KvCache kv;
    kv.dtype = dt;
    model::grow_kv(kv, 4, 0, 6);
    kv.store(true, 2, 6, x, 0.5f);
    float y[6];
    kv.load(true, 2, 6, y, 0.5f);
    for (int i = 0; i < 6; ++i) {
      float expect = x[i];
      if (dt == model::KvDtype::BF16) expect = bf16_to_f32(f32_to_bf16(x[i]));
      if (dt == model::KvDtype::FP8)
        expect = kernels::e4m3_table()[kernels::f32_to_e4m3(x[i] / 0.5f)] * 0.5f;
      EXPECT_EQ(y[i], expect) << model::kv_dtype_name(dt) << " element " << i;
    }
  }
  // FP8 saturates at ±448 · scale instead of overflowing.
  model::KvCache kv;
  kv.dtype = model::KvDtype::FP8;
  model::grow_kv(kv, 1, 0, 1);
  const float big = 1e6f;
  float y;
  kv.store(false, 0, 1, &big, 1.0f);
  kv.load(false, 0, 1, &y, 1.0f);
  EXPECT_EQ(y, 448.0f);
}

// --arith bf16 rounds the activations of NVFP4, FP8 and bf16 layers only: a ModelOpt or bf16
// checkpoint's logits move by about bf16's precision, an MLX (affine) or f32 checkpoint's do not
// move at all.
TEST(ModelArith, Bf16ActivationsChangeOnlyNvfp4Fp8AndBf16Layers) {
  using F = synth::SynthFormat;
  const auto Bf16 = kernels::Arith::Bf16;
  struct Expect {
    Target target;
    bool moves;
  };
  const Expect cases[] = {
      {{.preset = "tiny-q", .format = F::ModelOpt}, true},
      {{.preset = "tiny-q", .format = F::Mlx4}, false},
      {{.preset = "tiny-q", .format = F::Mlx8}, false},
      {{.preset = "tiny-a", .dtype = io::DType::BF16}, true},
      {{.preset = "tiny-a", .dtype = io::DType::F32}, false},
  };
  int compared = 0;
  for (const auto& [t, moves] : cases) {
    Target tb = t;
    tb.arith = Bf16;
    NemotronH &a = model_for(t), &b = model_for(tb);
    const auto prompt = random_tokens(20, a.config().vocab_size, 13);
    ForwardOptions fo;
    fo.all_logits = true;
    auto sa = a.new_state(), sb = b.new_state();
    const auto ra = a.forward(sa, prompt, fo, ThreadConfig{2}),
               rb = b.forward(sb, prompt, fo, ThreadConfig{2});
    ASSERT_EQ(ra.logits.size(), rb.logits.size());
    const auto [max_abs, max_ref] = logit_gap(rb.logits, ra.logits);
    std::printf("[ arith ] %s: bf16 vs f32 activations, max |d| / max |logit| = %.3g\n",
                test::target_id(t).c_str(), max_abs / max_ref);
    if (moves) {
      EXPECT_GT(max_abs / max_ref, 1e-3) << test::target_id(t);  // measured 5.4e-3 / 6.2e-3
      EXPECT_LT(max_abs / max_ref, 2e-2) << test::target_id(t);
    } else {
      EXPECT_EQ(max_abs, 0.0) << test::target_id(t);
    }
    ++compared;
  }
  EXPECT_EQ(compared, 5);
  EXPECT_THROW(kernels::parse_arith("fp16"), Error);
}
