// convert: a dense checkpoint through synth's writer with the source's values. The proof is
// byte equality: synth's dense f32 output holds synth's logical values exactly, so converting it
// must give byte for byte what synth writes directly in every format (tests/tools/
// test_convert_cli.py checks the same through the command line).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/error_of.h"
#include "../support/temp_dir.h"
#include "base/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "tools/convert/convert.h"
#include "tools/synth/synth.h"

using namespace nemo;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every file of two directories, byte for byte.
void expect_same_dirs(const std::string& a, const std::string& b) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    const fs::path other = fs::path(b) / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_TRUE(slurp(e.path()) == slurp(other)) << e.path().filename() << " differs";
    ++n;
  }
  EXPECT_EQ(n, size_t(std::distance(fs::directory_iterator(b), fs::directory_iterator{})));
}

struct Tensor {
  std::string name;
  io::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Rewrites DIR/model.safetensors after `edit` changed its tensor list.
void edit_tensors(const std::string& dir, const std::function<void(std::vector<Tensor>&)>& edit) {
  std::vector<Tensor> ts;
  {
    const auto st = io::TensorStore::open_dir(dir);
    for (const auto& n : st.names()) {
      const auto& v = st.get(n);
      ts.push_back({n, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)});
    }
  }
  edit(ts);
  io::SafetensorsWriter w((fs::path(dir) / "model.safetensors").string());
  for (const auto& t : ts) w.declare(t.name, t.dtype, t.shape);
  w.begin();
  for (const auto& t : ts) w.write(t.bytes);
  w.finish();
}

Tensor* find(std::vector<Tensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

synth::SynthOptions synth_opts(synth::SynthFormat f, io::DType dt = io::DType::BF16) {
  synth::SynthOptions o;
  o.seed = 7;
  o.format = f;
  o.dtype = dt;
  return o;
}

// A dense f32 tiny-q target, as a training pipeline writes it.
void write_f32_source(const std::string& dir) {
  synth::write_checkpoint(synth::preset_config("tiny-q"), dir,
                          synth_opts(synth::SynthFormat::Dense, io::DType::F32));
}

// The conversion's error message (empty if it succeeded).
std::string convert_error(const std::string& src, const std::string& dst,
                          synth::SynthOptions o = synth_opts(synth::SynthFormat::ModelOpt)) {
  return test::error_of([&] { convert::convert_checkpoint(src, dst, o); });
}

}  // namespace

TEST(Convert, DenseF32IsSynthByteForByteInEveryFormat) {
  test::TempDir src;
  write_f32_source(src.path());
  for (auto f : {synth::SynthFormat::ModelOpt, synth::SynthFormat::Mlx4, synth::SynthFormat::Mlx8,
                 synth::SynthFormat::Dense}) {
    SCOPED_TRACE(synth::synth_format_name(f));
    test::TempDir conv, ref;
    auto o = synth_opts(f);
    o.threads = 2;
    const auto r = convert::convert_checkpoint(src.path(), conv.path(), o);
    EXPECT_EQ(r.kind, "target");
    EXPECT_TRUE(r.tokenizer);
    synth::write_checkpoint(synth::preset_config("tiny-q"), ref.path(), synth_opts(f));
    expect_same_dirs(conv.path(), ref.path());
  }
}

// bf16 and f16 sources widen exactly; a sharded source reads like a single file.
TEST(Convert, HalfAndShardedSourcesRoundTrip) {
  for (auto dt : {io::DType::BF16, io::DType::F16}) {
    SCOPED_TRACE(io::dtype_name(dt));
    test::TempDir src, conv;
    auto so = synth_opts(synth::SynthFormat::Dense, dt);
    so.shard_bytes = 64 << 10;
    synth::write_checkpoint(synth::preset_config("tiny-q"), src.path(), so);
    ASSERT_TRUE(fs::exists(src.file("model.safetensors.index.json")));
    convert::convert_checkpoint(src.path(), conv.path(), so);
    expect_same_dirs(conv.path(), src.path());
  }
}

// A drafter keeps its own shape and config (taps, layers, block size, mask token, markov rank,
// window, unknown keys and key order); only "dtype" changes.
TEST(Convert, DrafterKeepsItsOwnShapeAndConfig) {
  for (auto kind : {synth::DrafterKind::DFlash, synth::DrafterKind::DSpark}) {
    test::TempDir src, conv, ref;
    synth::DrafterShape shape = synth::drafter_shape(kind, synth::preset_config("tiny-q"));
    shape.config.layers = 3;
    shape.config.target_layer_ids = {0, 4};
    nlohmann::ordered_json j;
    j["zz_trainer_note"] = "first";  // key order is kept: this stays the first key
    for (const auto& [k, v] : shape.config_json.items()) j[k] = v;
    j["num_hidden_layers"] = 3;
    j["dflash_config"]["target_layer_ids"] = {0, 4};
    j["dflash_config"]["mask_token_id"] = 7;
    j["block_size"] = 6;
    if (kind == synth::DrafterKind::DSpark) {
      shape.config.markov_rank = 16;
      j["dspark_markov_rank"] = 16;
      j["markov_rank"] = 16;
      j["dflash_config"]["swa_window_size"] = 64;
    }
    shape.config_json = j;
    auto so = synth_opts(synth::SynthFormat::Dense, io::DType::F32);
    so.dense_drafter = true;
    synth::write_drafter(shape, src.path(), so);
    EXPECT_FALSE(fs::exists(src.file("hf_quant_config.json")));
    const auto r = convert::convert_checkpoint(src.path(), conv.path(),
                                               synth_opts(synth::SynthFormat::ModelOpt));
    EXPECT_EQ(r.kind, kind == synth::DrafterKind::DSpark ? "dspark" : "dflash");
    synth::write_drafter(shape, ref.path(), synth_opts(synth::SynthFormat::ModelOpt));
    expect_same_dirs(conv.path(), ref.path());
    auto out = nlohmann::ordered_json::parse(slurp(conv.file("config.json")));
    EXPECT_EQ(out.begin().key(), "zz_trainer_note");
    EXPECT_EQ(out["dtype"], "bfloat16");
    out["dtype"] = "float32";
    EXPECT_EQ(out, nlohmann::ordered_json::parse(slurp(src.file("config.json"))));
    EXPECT_TRUE(fs::exists(conv.file("hf_quant_config.json")));
  }
}

TEST(Convert, MissingExtraMisshapenAndNonFloatTensorsAreNamed) {
  test::TempDir src, dst;
  write_f32_source(src.path());
  const std::string file = src.file("model.safetensors");
  const std::string emb = "backbone.embeddings.weight", norm = "backbone.layers.0.norm.weight";
  struct Case {
    const char* what;
    std::function<void(std::vector<Tensor>&)> edit;
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"missing",
       [&](auto& ts) { std::erase_if(ts, [&](const Tensor& t) { return t.name == norm; }); },
       {file, "'" + norm + "' is missing", "[128]"}},
      {"extra",
       [](auto& ts) {
         ts.push_back(
             {"backbone.layers.0.mixer.extra", io::DType::F32, {4}, std::vector<uint8_t>(16)});
       },
       {file, "unexpected tensor 'backbone.layers.0.mixer.extra'"}},
      {"shape",
       [&](auto& ts) {
         find(ts, emb)->shape = {256, 256};
       },
       {file, "'" + emb + "' has shape [256, 256], but config.json makes it [512, 128]"}},
      {"dtype",
       [&](auto& ts) { find(ts, norm)->dtype = io::DType::I32; },
       {file, "'" + norm + "' is I32"}},
      {"quantized dtype",
       [&](auto& ts) {
         Tensor* t = find(ts, norm);
         t->dtype = io::DType::U8;
         t->shape = {512};
       },
       {file, "'" + norm + "' is U8, a quantized dtype"}},
      {"quantization scale",
       [](auto& ts) {
         ts.push_back({"backbone.layers.0.mixer.in_proj.weight_scale",
                       io::DType::F32,
                       {},
                       std::vector<uint8_t>(4)});
       },
       {"'backbone.layers.0.mixer.in_proj.weight_scale' (a quantization scale"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    test::TempDir s;
    fs::copy(src.path(), s.path(),
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    edit_tensors(s.path(), c.edit);
    const std::string err = convert_error(s.path(), dst.path());
    for (const auto& n : c.needles) {
      const std::string needle = n == file ? s.file("model.safetensors") : n;
      EXPECT_NE(err.find(needle), std::string::npos) << "'" << needle << "' not in: " << err;
    }
    EXPECT_FALSE(fs::exists(dst.file("config.json")))
        << "nothing is written before the source checks out";
  }
}

TEST(Convert, QuantizedSourcesAreRefused) {
  test::TempDir mo, mlx, dst;
  synth::write_checkpoint(synth::preset_config("tiny-q"), mo.path(),
                          synth_opts(synth::SynthFormat::ModelOpt));
  EXPECT_NE(convert_error(mo.path(), dst.path()).find("a quantized checkpoint"), std::string::npos);
  synth::write_checkpoint(synth::preset_config("tiny-q"), mlx.path(),
                          synth_opts(synth::SynthFormat::Mlx4));
  const std::string e = convert_error(mlx.path(), dst.path());
  EXPECT_NE(e.find(mlx.file("config.json")), std::string::npos) << e;
  EXPECT_NE(e.find("a quantized checkpoint (\"quantization"), std::string::npos) << e;
  EXPECT_NE(convert_error(mo.path(), mo.path()).find("is the source directory"), std::string::npos);
}

// A value the quantizers must not see fails mid-write; the output then has no config.json.
TEST(Convert, NonFiniteValueLeavesNothingThatLoads) {
  test::TempDir src, dst;
  write_f32_source(src.path());
  const std::string name = "backbone.layers.3.mixer.out_proj.weight";
  edit_tensors(src.path(), [&](auto& ts) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(find(ts, name)->bytes.data() + 4 * 5, &nan, 4);
  });
  const std::string err = convert_error(src.path(), dst.path());
  EXPECT_NE(err.find("'" + name + "' holds a non-finite value (nan) at element 5"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dst.file("config.json")));
  EXPECT_THROW(io::load_model_config(dst.path()), Error);
}
