#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../support/temp_dir.h"
#include "base/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "tools/synth/synth.h"

using namespace nemo;

TEST(Synth, LightningLayoutMatchesSpec) {
  auto c = synth::preset_config("lightning");
  EXPECT_EQ(c.pattern(), "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME");
  auto layout = synth::checkpoint_layout(c, {});
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : layout) shapes[t.name] = t.shape;
  // Shapes quoted from spec nemotron_h.md §7.
  EXPECT_EQ(shapes["backbone.embeddings.weight"], (std::vector<int64_t>{131072, 2688}));
  EXPECT_EQ(shapes["lm_head.weight"], (std::vector<int64_t>{131072, 2688}));
  EXPECT_EQ(shapes["backbone.layers.0.mixer.in_proj.weight"], (std::vector<int64_t>{10304, 2688}));
  EXPECT_EQ(shapes["backbone.layers.0.mixer.conv1d.weight"], (std::vector<int64_t>{6144, 1, 4}));
  EXPECT_EQ(shapes["backbone.layers.0.mixer.norm.weight"], (std::vector<int64_t>{4096}));
  EXPECT_EQ(shapes["backbone.layers.0.mixer.out_proj.weight"], (std::vector<int64_t>{2688, 4096}));
  EXPECT_EQ(shapes["backbone.layers.5.mixer.k_proj.weight"], (std::vector<int64_t>{256, 2688}));
  EXPECT_EQ(shapes["backbone.layers.5.mixer.o_proj.weight"], (std::vector<int64_t>{2688, 4096}));
  EXPECT_EQ(shapes["backbone.layers.1.mixer.gate.weight"], (std::vector<int64_t>{128, 2688}));
  EXPECT_EQ(shapes["backbone.layers.51.mixer.experts.127.down_proj.weight"],
            (std::vector<int64_t>{2688, 1856}));
  EXPECT_EQ(shapes["backbone.layers.1.mixer.shared_experts.up_proj.weight"],
            (std::vector<int64_t>{3712, 2688}));
  EXPECT_EQ(shapes["mtp.layers.0.eh_proj.weight"], (std::vector<int64_t>{2688, 5376}));
  EXPECT_TRUE(shapes.count("mtp.layers.1.final_layernorm.weight"));
  EXPECT_TRUE(shapes.count("mtp.layers.1.mixer.experts.0.up_proj.weight"));
  EXPECT_FALSE(shapes.count("backbone.layers.5.mixer.in_proj.weight"));
  // ≈31.6B parameters in total (nemotron_h.md §7).
  double params = 0;
  for (const auto& t : layout) {
    double n = 1;
    for (auto d : t.shape) n *= double(d);
    params += n;
  }
  EXPECT_NEAR(params / 1e9, 31.6 + 0.6, 1.0);  // + the MTP module (~0.6B)
  for (const auto& t : layout) {
    if (t.name.find("e_score_correction_bias") != std::string::npos) {
      EXPECT_EQ(t.dtype, io::DType::F32);
    }
  }
}

TEST(Synth, DeterministicAndIndependentOfLayerCount) {
  test::TempDir a, b;
  synth::SynthOptions o;
  o.seed = 11;
  synth::write_checkpoint(synth::preset_config("tiny-b"), a.path(), o);
  o.threads = 2;
  synth::write_checkpoint(synth::preset_config("tiny-b", 3), b.path(), o);
  auto sa = io::TensorStore::open_dir(a.path());
  auto sb = io::TensorStore::open_dir(b.path());
  int compared = 0;
  for (const auto& n : sb.names()) {
    const auto& x = sa.get(n);
    const auto& y = sb.get(n);
    ASSERT_EQ(x.nbytes, y.nbytes);
    ASSERT_EQ(0, std::memcmp(x.data, y.data, x.nbytes)) << n;
    ++compared;
  }
  EXPECT_GT(compared, 10);
  EXPECT_FALSE(sb.has("backbone.layers.3.norm.weight"));
  // The config reads back and has bare Infinity like HF writes it.
  std::ifstream f(a.file("config.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("Infinity"), std::string::npos);
  EXPECT_EQ(io::load_model_config(a.path()).pattern(), "MEM*EM*E");
}

TEST(Synth, ShardsWithIndex) {
  test::TempDir d;
  synth::SynthOptions o;
  o.shard_bytes = 200 * 1024;
  synth::write_checkpoint(synth::preset_config("tiny-a"), d.path(), o);
  EXPECT_TRUE(std::filesystem::exists(d.file("model.safetensors.index.json")));
  auto st = io::TensorStore::open_dir(d.path());
  EXPECT_TRUE(st.has("mtp.layers.0.eh_proj.weight"));
  EXPECT_TRUE(st.has("lm_head.weight"));
}

TEST(Synth, BadPresetAndPattern) {
  EXPECT_THROW(synth::preset_config("nope"), Error);
  EXPECT_THROW(synth::preset_config("tiny-a", 0, "MX"), Error);
  EXPECT_THROW(synth::preset_config("tiny-a", 99), Error);
}

TEST(Synth, ParallelQuantizationIsByteIdentical) {
  test::TempDir a, b;
  synth::SynthOptions o;
  o.seed = 5;
  o.format = synth::SynthFormat::ModelOpt;
  o.threads = 1;
  synth::write_checkpoint(synth::preset_config("tiny-q"), a.path(), o);
  o.threads = 3;
  synth::write_checkpoint(synth::preset_config("tiny-q"), b.path(), o);
  auto sa = io::TensorStore::open_dir(a.path());
  auto sb = io::TensorStore::open_dir(b.path());
  ASSERT_EQ(sa.names(), sb.names());
  for (const auto& n : sa.names()) {
    const auto& x = sa.get(n);
    const auto& y = sb.get(n);
    ASSERT_EQ(x.nbytes, y.nbytes);
    ASSERT_EQ(0, std::memcmp(x.data, y.data, x.nbytes)) << n;
  }
}

// An interrupted write leaves no directory that loads, even over an earlier complete checkpoint:
// config.json goes first and comes back last (and every file is written to .tmp and renamed).
TEST(Synth, InterruptedWriteLeavesNothingThatLoads) {
  test::TempDir d;
  const auto cfg = synth::preset_config("tiny-a");
  synth::write_checkpoint(cfg, d.path(), {});
  ASSERT_TRUE(std::filesystem::exists(d.file("config.json")));
  synth::SynthOptions o;
  o.seed = 9;
  int units = 0;
  o.progress = [&](const std::string&, uint64_t, uint64_t) {
    if (++units == 5) throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(synth::write_checkpoint(cfg, d.path(), o), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(d.file("config.json")));
  EXPECT_THROW(io::load_model_config(d.path()), Error);
  EXPECT_GE(units, 5) << "the interruption must happen mid-write";
  // Writing again completes it.
  o.progress = nullptr;
  synth::write_checkpoint(cfg, d.path(), o);
  EXPECT_NO_THROW(io::load_model_config(d.path()));
}
