// safetensors reader/writer: round trips, every dtype, sharding, and malformed files.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/error_of.h"
#include "../support/temp_dir.h"
#include "base/error.h"
#include "io/safetensors.h"

using namespace nemo;
using namespace nemo::io;

namespace {

void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(char(n >> (8 * i)));
  f << header;
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

using nemo::test::error_of;

}  // namespace

TEST(Safetensors, WriterRoundTripAllDtypes) {
  test::TempDir d;
  const std::string p = d.file("model.safetensors");
  const std::vector<std::pair<DType, std::vector<int64_t>>> cases = {
      {DType::BF16, {3, 5}}, {DType::F16, {7}},      {DType::F32, {2, 2, 2}}, {DType::F8_E4M3, {4, 16}},
      {DType::U8, {9}},      {DType::I32, {3}},      {DType::U32, {2, 3}},    {DType::F64, {1}},
      {DType::I64, {2}},     {DType::BOOL, {5}},     {DType::I8, {3}},        {DType::U16, {2}},
      {DType::F32, {}},      {DType::F32, {0, 4}}};
  {
    SafetensorsWriter w(p);
    w.set_metadata("format", "pt");
    for (size_t i = 0; i < cases.size(); ++i) w.declare("t" + std::to_string(i), cases[i].first, cases[i].second);
    w.begin();
    for (size_t i = 0; i < cases.size(); ++i) {
      int64_t n = 1;
      for (auto x : cases[i].second) n *= x;
      std::vector<uint8_t> b(size_t(n * dtype_bits(cases[i].first) / 8));
      for (size_t k = 0; k < b.size(); ++k) b[k] = uint8_t(i * 31 + k);
      w.write(b);
    }
    w.finish();
  }
  SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& t = f.tensors().at("t" + std::to_string(i));
    EXPECT_EQ(t.dtype, cases[i].first);
    EXPECT_EQ(t.shape, cases[i].second);
    for (size_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(t.data[k], uint8_t(i * 31 + k)) << t.name;
  }
}

TEST(Safetensors, UnalignedOffsetsAndWhitespaceHeader) {
  // MLX-style: unpadded header, odd offsets.
  test::TempDir d;
  const std::string p = d.file("m.safetensors");
  const std::string h = R"(  {"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[1],"data_offsets":[3,7]}}  )";
  float v = 1.5f;
  std::vector<uint8_t> data = {1, 2, 3, 0, 0, 0, 0};
  std::memcpy(data.data() + 3, &v, 4);
  write_raw(p, h, data);
  SafetensorsFile f(p);
  float got;
  std::memcpy(&got, f.tensors().at("b").data, 4);
  EXPECT_EQ(got, 1.5f);
}

struct BadCase {
  const char* what;
  std::string header;
  size_t data_bytes;
  const char* expect;  // substring of the error
};

TEST(Safetensors, MalformedFilesGiveNamedErrors) {
  const std::vector<BadCase> cases = {
      {"not json", "{nope", 0, "malformed header JSON"},
      {"not object", "[1,2]", 0, "not a JSON object"},
      {"unknown dtype", R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1, "unknown dtype 'Q4'"},
      {"size mismatch", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "'w': dtype F32 x shape"},
      {"past end", R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 4, "run past the end"},
      {"overlap",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
       6, "overlaps"},
      {"hole", R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4, "hole"},
      {"trailing", R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5, "trailing"},
      {"negative shape", R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0, "non-negative"},
      {"end<begin", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[3,1]}})", 3, "end 1 < begin 3"},
      {"missing offsets", R"({"a":{"dtype":"U8","shape":[1]}})", 1, "data_offsets"},
      {"bad metadata", R"({"__metadata__":{"k":1}})", 0, "__metadata__ value 'k'"},
      {"huge shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "too large"},
  };
  for (const auto& c : cases) {
    test::TempDir d;
    const std::string p = d.file("bad.safetensors");
    write_raw(p, c.header, std::vector<uint8_t>(c.data_bytes));
    const std::string err = error_of([&] { SafetensorsFile f(p); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got '" << err << "'";
    EXPECT_NE(err.find(p), std::string::npos) << c.what << ": error must name the file";
  }
}

TEST(Safetensors, TruncatedFiles) {
  test::TempDir d;
  const std::string p = d.file("model.safetensors");
  {
    SafetensorsWriter w(p);
    w.declare("x", DType::F32, {64});
    w.begin();
    std::vector<uint8_t> b(256, 7);
    w.write(b);
    w.finish();
  }
  std::ifstream in(p, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), {});
  // Every truncation point must fail cleanly, never crash.
  for (size_t cut : {size_t(0), size_t(3), size_t(8), size_t(20), all.size() - 1}) {
    const std::string q = d.file("cut.safetensors");
    std::ofstream(q, std::ios::binary).write(all.data(), std::streamsize(cut));
    EXPECT_NE(error_of([&] { SafetensorsFile f(q); }), "") << "cut at " << cut;
  }
  // A huge header length is rejected before any allocation.
  const std::string q = d.file("huge.safetensors");
  {
    std::ofstream f(q, std::ios::binary);
    uint64_t n = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  EXPECT_NE(error_of([&] { SafetensorsFile f(q); }).find("exceeds"), std::string::npos);
}

TEST(Safetensors, ShardedDirectory) {
  test::TempDir d;
  for (int s = 0; s < 2; ++s) {
    SafetensorsWriter w(d.file("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"));
    w.declare("t" + std::to_string(s), DType::U8, {4});
    w.begin();
    std::vector<uint8_t> b(4, uint8_t(s + 1));
    w.write(b);
    w.finish();
  }
  nlohmann::json idx = {{"metadata", {{"total_size", 8}}},
                        {"weight_map",
                         {{"t0", "model-00001-of-00002.safetensors"}, {"t1", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(d.file("model.safetensors.index.json")) << idx.dump();
  auto st = TensorStore::open_dir(d.path());
  EXPECT_EQ(st.get("t1").data[0], 2);
  EXPECT_EQ(st.total_bytes(), 8u);
  EXPECT_EQ(st.find("t9"), nullptr);
  EXPECT_NE(error_of([&] { st.get("t9"); }).find("missing tensor 't9'"), std::string::npos);

  // Missing shard, tensor listed but absent, path escape.
  idx["weight_map"]["t2"] = "model-00003-of-00002.safetensors";
  std::ofstream(d.file("model.safetensors.index.json")) << idx.dump();
  EXPECT_NE(error_of([&] { TensorStore::open_dir(d.path()); }).find("missing shard"), std::string::npos);
  idx["weight_map"]["t2"] = "model-00001-of-00002.safetensors";
  std::ofstream(d.file("model.safetensors.index.json")) << idx.dump();
  EXPECT_NE(error_of([&] { TensorStore::open_dir(d.path()); }).find("absent from the shard"), std::string::npos);
  idx["weight_map"]["t2"] = "../etc/passwd";
  std::ofstream(d.file("model.safetensors.index.json")) << idx.dump();
  EXPECT_NE(error_of([&] { TensorStore::open_dir(d.path()); }).find("outside the directory"), std::string::npos);
  std::ofstream(d.file("model.safetensors.index.json")) << "{bad json";
  EXPECT_NE(error_of([&] { TensorStore::open_dir(d.path()); }).find("malformed JSON"), std::string::npos);
}

TEST(Safetensors, WriterNeverLeavesHalfFile) {
  test::TempDir d;
  const std::string p = d.file("model.safetensors");
  {
    SafetensorsWriter w(p);
    w.declare("x", DType::F32, {4});
    w.begin();
    std::vector<uint8_t> b(8);
    w.write(b);
    EXPECT_THROW(w.finish(), Error);  // only half the data
  }
  EXPECT_FALSE(std::filesystem::exists(p));
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}
