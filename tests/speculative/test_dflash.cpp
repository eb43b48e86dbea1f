// DFlash and DSpark drafters at run time (dflash_dspark.md §1–§3, §7).
//  - Greedy: with either drafter, on a dense target and on every quantized format (ModelOpt NVFP4
//    + FP8, W8A8 static, MLX 4/8-bit) with every KV-cache dtype, γ = 1..block−1, the tokens and
//    the logits each was decided from are bitwise those of plain decoding.
//  - The context path is live: the drafter's logits depend on the target's taps.
//  - Sampling: the first three tokens follow the target's exact distribution (chi-square), with
//    the drafter's real q in the rejection rule.
//  - Bad pairs: one clear error each.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/dflash.h"
#include "speculative/dflash_drafter.h"
#include "support.h"

using namespace nemo;
using namespace nemo::test;
namespace fs = std::filesystem;

namespace {

struct DraftFixture {
  TempDir dir;
  std::unique_ptr<model::DFlashModel> d;
};

// The synth drafter of `kind` sized for `preset`, paired with `target`.
const model::DFlashModel& drafter_for(const model::NemotronH& target, const std::string& preset,
                                      synth::DrafterKind kind) {
  static std::map<std::pair<const model::NemotronH*, int>, std::unique_ptr<DraftFixture>> cache;
  auto& f = cache[{&target, int(kind)}];
  if (!f) {
    f = std::make_unique<DraftFixture>();
    synth::SynthOptions o;
    o.seed = 5;
    synth::write_drafter_checkpoint(kind, synth::preset_config(preset), f->dir.path(), o);
    f->d = model::DFlashModel::load(f->dir.path(), target);
  }
  return *f->d;
}

struct Case {
  Target target;
  synth::DrafterKind kind;
};
std::string case_name(const testing::TestParamInfo<Case>& i) {
  return target_id(i.param.target).substr(5) + "_" +
         (i.param.kind == synth::DrafterKind::DSpark ? "dspark" : "dflash");
}
void PrintTo(const Case& c, std::ostream* os) {
  *os << target_id(c.target) << (c.kind == synth::DrafterKind::DSpark ? " dspark" : " dflash");
}
// Both drafters on a dense target, and on every quantized format and KV-cache dtype.
std::vector<Case> cases() {
  std::vector<Case> v;
  std::vector<Target> ts = format_targets();
  ts.insert(ts.begin(), Target{"tiny-a"});
  for (const Target& t : ts)
    for (auto kind : {synth::DrafterKind::DFlash, synth::DrafterKind::DSpark})
      v.push_back({t, kind});
  return v;
}

}  // namespace

class DFlashGreedy : public testing::TestWithParam<Case> {};

TEST_P(DFlashGreedy, BitwisePlainDecodingEveryGamma) {
  const Case c = GetParam();
  const auto& m = model_for(c.target);
  const auto& d = drafter_for(m, c.target.preset, c.kind);
  const int64_t V = m.config().vocab_size;
  EXPECT_EQ(d.block_size(), 8);
  int64_t drafted = 0;
  for (int pk = 0; pk < 3; ++pk) {
    SpecRequest req;
    req.prompt = prompt_of(pk, V);
    req.max_tokens = 24;
    const SpecRun base = run(m, req, nullptr);
    for (int gamma = 1; gamma <= d.block_size() - 1; ++gamma) {
      req.draft_max = gamma;
      speculative::DFlashDrafter dr(d, ThreadConfig{1});
      const SpecRun r = run(m, req, &dr, gamma % 2 ? 1 : 2);
      ASSERT_EQ(r.tokens, base.tokens) << dr.name() << " gamma " << gamma << " prompt " << pk;
      ASSERT_EQ(0, std::memcmp(r.logits.data(), base.logits.data(), base.logits.size() * 4))
          << dr.name() << " gamma " << gamma << " prompt " << pk << ": logits differ";
      EXPECT_EQ(r.stats.emitted, 24);
      drafted += r.stats.drafted;
      // The context only ever holds committed rows (never more than prompt + emitted − the anchor).
      EXPECT_GE(dr.context().n, int64_t(req.prompt.size()));
      EXPECT_LE(dr.context().n, int64_t(req.prompt.size() + r.tokens.size()) - 1)
          << "gamma " << gamma;
    }
  }
  EXPECT_GT(drafted, 0);
}

INSTANTIATE_TEST_SUITE_P(Pairs, DFlashGreedy, testing::ValuesIn(cases()), case_name);

// A drafter that ignored its context would pass every lossless test: its logits must move
// when the taps it is given change (here: zeroed), and not otherwise.
TEST(DFlashContext, LogitsDependOnTheTaps) {
  for (auto kind : {synth::DrafterKind::DFlash, synth::DrafterKind::DSpark}) {
    const auto& m = model_for("tiny-a");
    const auto& d = drafter_for(m, "tiny-a", kind);
    const std::vector<int32_t> prompt = prompt_of(1, m.config().vocab_size);
    auto st = m.new_state();
    model::ForwardOptions fo;
    fo.taps = d.tap_layers();
    const auto r = m.forward(st, prompt, fo, ThreadConfig{1});
    ASSERT_EQ(r.taps.size(),
              prompt.size() * d.tap_layers().size() * size_t(m.config().hidden_size));
    auto draft_logits = [&](const float* taps) {
      speculative::DFlashDrafter dr(d, ThreadConfig{1});
      dr.begin(prompt, taps, 7);
      Rng rng(1);
      dr.propose(3, {}, rng);
      return dr.last_round().base;
    };
    const std::vector<float> zeros(r.taps.size(), 0.0f);
    const auto a = draft_logits(r.taps.data()), b = draft_logits(r.taps.data()),
               z = draft_logits(zeros.data());
    ASSERT_EQ(a.size(), size_t(3 * m.config().vocab_size));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4))
        << "the drafter must be deterministic";
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - z[i])));
    EXPECT_GT(diff, 1e-3) << (kind == synth::DrafterKind::DSpark ? "dspark" : "dflash")
                          << ": zeroing the taps does not change the draft logits";
  }
}

// Taps are the residual stream after the named layers, for every row, and cost nothing when not
// asked for: the logits are bitwise the same either way.
TEST(DFlashContext, TapsAreTheResidualAfterTheLayer) {
  const auto& m = model_for("tiny-a");
  const int64_t H = m.config().hidden_size, L = int64_t(m.config().layers.size());
  const std::vector<int32_t> prompt = {5, 9, 2, 7};
  const std::vector<int64_t> taps = {L - 1, 0};
  auto s1 = m.new_state(), s2 = m.new_state(), s3 = m.new_state();
  model::ForwardOptions fo;
  fo.all_logits = true;
  const auto plain = m.forward(s1, prompt, fo, ThreadConfig{1});
  fo.taps = taps;
  const auto tapped = m.forward(s2, prompt, fo, ThreadConfig{1});
  ASSERT_EQ(0, std::memcmp(plain.logits.data(), tapped.logits.data(), plain.logits.bytes()));
  // Tap L−1 (pre-norm) through norm_f and lm_head is the logits row: check via the post-norm
  // switch.
  fo.tap_last_post_norm = true;
  const auto post = m.forward(s3, prompt, fo, ThreadConfig{1});
  const int64_t V = m.config().vocab_size;
  std::vector<float> lg(static_cast<size_t>(V));
  for (int64_t t = 0; t < int64_t(prompt.size()); ++t) {
    m.logits_from_hidden(post.taps.data() + (t * 2 + 0) * H, 1, lg.data(), ThreadConfig{1});
    ASSERT_EQ(0, std::memcmp(lg.data(), plain.logits.data() + t * V, size_t(V) * 4)) << "row " << t;
    // Pre-norm taps differ from post-norm ones; tap 0 is unaffected by the switch.
    EXPECT_NE(0, std::memcmp(tapped.taps.data() + t * 2 * H, post.taps.data() + t * 2 * H,
                             size_t(H) * 4));
    EXPECT_EQ(0, std::memcmp(tapped.taps.data() + (t * 2 + 1) * H,
                             post.taps.data() + (t * 2 + 1) * H, size_t(H) * 4));
  }
}

// ---- bad pairs -----------------------------------------------------------------------------

namespace {

// A copy of a synth drafter with config.json edited by `edit`; loading it against `target`
// must fail with a message containing `want`.
void expect_bad_pair(const model::NemotronH& target, const std::string& preset,
                     synth::DrafterKind kind, const std::function<void(nlohmann::json&)>& edit,
                     const std::string& want, bool drop_modelopt_config = false) {
  TempDir dir;
  synth::write_drafter_checkpoint(kind, synth::preset_config(preset), dir.path(), {});
  if (drop_modelopt_config) fs::remove(dir.file("hf_quant_config.json"));
  const std::string cfg = dir.file("config.json");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  edit(j);
  std::ofstream(cfg) << j.dump(2);
  try {
    model::DFlashModel::load(dir.path(), target);
    ADD_FAILURE() << "loaded a bad pair; expected an error containing '" << want << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

}  // namespace

TEST(DFlashPairing, BadPairsGiveOneClearError) {
  const auto& a = model_for("tiny-a");
  const auto k = synth::DrafterKind::DSpark;
  auto none = [](nlohmann::json&) {};
  expect_bad_pair(model_for("tiny-b"), "tiny-a", k, none,
                  "hidden_size 64 does not match the target's 96");
  expect_bad_pair(
      a, "tiny-a", k, [](nlohmann::json& j) { j["vocab_size"] = 1000; },
      "vocab_size 1000 does not match the target's 512");
  expect_bad_pair(
      a, "tiny-a", k,
      [](nlohmann::json& j) {
        j["dflash_config"]["target_layer_ids"] = {1, 6};
      },
      "target layer id 6");
  expect_bad_pair(
      a, "tiny-a", k, [](nlohmann::json& j) { j["dflash_config"]["mask_token_id"] = 512; },
      "mask_token_id 512 is outside the vocabulary");
  expect_bad_pair(
      a, "tiny-a", k,
      [](nlohmann::json& j) {
        j["dflash_config"].erase("mask_token_id"), j.erase("mask_token_id");
      },
      "no mask_token_id");
  expect_bad_pair(
      a, "tiny-a", k,
      [](nlohmann::json& j) {
        j["quantization"] = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}};
      },
      "MLX-quantized drafters are not supported", true);
  expect_bad_pair(
      a, "tiny-a", k,
      [](nlohmann::json& j) {
        j["architectures"] = {"LlamaForCausalLM"}, j.erase("dflash_config"),
        j.erase("dspark_markov_rank"), j.erase("markov_rank"), j.erase("dspark_fixup_head_type");
      },
      "not a DFlash / DSpark drafter");
  // The engine refuses a drafter with the wrong mode, and a drafter mode without a drafter.
  const auto& d = drafter_for(a, "tiny-a", synth::DrafterKind::DFlash);
  EXPECT_THROW(engine::Generator(a, ThreadConfig{1}, engine::SpecMode::DSpark, 0, &d), Error);
  EXPECT_THROW(engine::Generator(a, ThreadConfig{1}, engine::SpecMode::DFlash, 0, nullptr), Error);
  EXPECT_THROW(engine::Generator(a, ThreadConfig{1}, engine::SpecMode::Mtp, 0, &d), Error);
  EXPECT_EQ(engine::Generator(a, ThreadConfig{1}, engine::SpecMode::Auto, 0, &d).mode(),
            engine::SpecMode::DFlash);
  EXPECT_EQ(engine::Generator(a, ThreadConfig{1}, engine::SpecMode::Auto, 0, &d).draft_max(), 7);
}

// ---- sampling ------------------------------------------------------------------------------

TEST(DFlashSampling, FirstThreeTokensFollowTheTargetDistribution) {
  const auto& m = model_for("tiny-a");
  const SamplingParams sp = first_three_sampling();
  const std::vector<int32_t>& prompt = kFirstThreePrompt;
  const Joint exact = exact_first_three(m, prompt, sp);
  for (auto kind : {synth::DrafterKind::DFlash, synth::DrafterKind::DSpark}) {
    const auto& d = drafter_for(m, "tiny-a", kind);
    const int N = 4000;
    SpecRequest req = first_three_request();
    std::map<std::vector<int32_t>, int> counts;
    int64_t drafted = 0;
    for (int i = 0; i < N; ++i) {
      req.sampling.seed = uint64_t(7000 + i);
      speculative::DFlashDrafter dr(d, ThreadConfig{1});
      const SpecRun r = run(m, req, &dr);
      ASSERT_EQ(r.tokens.size(), 3u);
      counts[r.tokens]++;
      drafted += r.stats.drafted;
    }
    EXPECT_GT(drafted, 0);
    for (auto& [t, c] : counts)
      ASSERT_TRUE(exact.count(t)) << "sampled a sequence outside the target's support";
    // Chi-square of each token's marginal and of (t1, t2): cells with enough expected counts.
    for (int mask : {1, 2, 4, 3}) {
      double chi2 = 0;
      int cells = 0;
      EXPECT_GT(chi2_pvalue(exact, counts, N, mask, &chi2, &cells), 0.001)
          << (kind == synth::DrafterKind::DSpark ? "dspark" : "dflash") << " positions mask " << mask << ": chi2 "
          << chi2 << " over " << cells << " cells";
    }
  }
}
