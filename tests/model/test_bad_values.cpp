// Non-finite values and out-of-vocabulary special tokens: a clear error, never silent garbage.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/temp_dir.h"
#include "base/error.h"
#include "io/model_config.h"
#include "model/nemotron_h.h"
#include "tools/synth/synth.h"

using namespace nemo;

namespace {

// Byte offset of `tensor`'s data in a safetensors file (formats.md §1.1: u64 header length, JSON
// header).
uint64_t offset_of(const std::string& file, const std::string& tensor) {
  std::ifstream f(file, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), std::streamsize(n));
  return 8 + n + nlohmann::json::parse(header)[tensor]["data_offsets"][0].get<uint64_t>();
}

}  // namespace

TEST(BadValues, NanEmbeddingRowIsAnErrorNotOutput) {
  test::TempDir d;
  synth::write_checkpoint(synth::preset_config("tiny-a"), d.path(), {});
  const uint64_t off = offset_of(d.file("model.safetensors"), "backbone.embeddings.weight");
  {
    std::fstream f(d.path() + "/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    const uint16_t nan_bf16 = 0x7FC0;
    f.seekp(std::streamoff(off + 5 * 64 * 2));  // row 5 (H = 64), element 0
    f.write(reinterpret_cast<const char*>(&nan_bf16), 2);
  }
  auto m = model::NemotronH::load(d.path());
  auto st = m->new_state();
  const int32_t ok[1] = {4}, bad[1] = {5};
  EXPECT_NO_THROW(m->forward(st, ok, {}, ThreadConfig{1}));
  try {
    m->forward(st, bad, {}, ThreadConfig{1});
    ADD_FAILURE() << "a NaN embedding row produced logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite logits"), std::string::npos) << e.what();
  }
}

TEST(BadValues, SpecialTokensOutsideTheVocabularyAreRefused) {
  for (const char* key : {"eos_token_id", "bos_token_id", "pad_token_id"}) {
    test::TempDir d;
    synth::write_checkpoint(synth::preset_config("tiny-a"), d.path(), {});
    std::ifstream in(d.file("config.json"));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    nlohmann::json j = nlohmann::json::parse(io::quote_nonfinite_literals(text));
    j[key] = 512;  // vocab is 512
    std::ofstream(d.file("config.json")) << j.dump();
    try {
      model::NemotronH::load(d.path());
      ADD_FAILURE() << key << " 512 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(key) + " 512 is outside the vocabulary"),
                std::string::npos)
          << e.what();
    }
  }
}
