#include "fuzz_targets.h"

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "io/drafter_config.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace nemo::io::fuzz {
namespace {

bool names(const nemo::Error& e, const std::string& file) {
  return std::string_view(e.what()).find(file) != std::string_view::npos;
}
}  // namespace

Outcome safetensors_file(const uint8_t* data, size_t size) {
  // An in-memory file the reader maps like any other (no disk traffic per input).
  static const int fd = memfd_create("fuzz.safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  FUZZ_CHECK(fd >= 0 && ftruncate(fd, 0) == 0);
  FUZZ_CHECK(pwrite(fd, data, size, 0) == ssize_t(size));
  try {
    SafetensorsFile f(path);
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
    const uint8_t* begin = nullptr;
    uint64_t covered = 0;
    for (const auto& [name, t] : f.tensors()) {
      FUZZ_CHECK(t.name == name && *t.file == path);
      FUZZ_CHECK(uint64_t(t.numel()) * dtype_bits(t.dtype) / 8 == t.nbytes);
      if (t.nbytes && (!begin || t.data < begin)) begin = t.data;
      covered += t.nbytes;
    }
    FUZZ_CHECK(covered == size - 8 - header);
    return Outcome::Accepted;
  } catch (const nemo::Error& e) {
    FUZZ_CHECK(names(e, path));
    return Outcome::Rejected;
  }
}

Outcome config_json(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Outcome::Rejected;
  (void)parse_drafter_config(j);
  (void)drafter_kind(j);
  for (int as_config = 0; as_config < 2; ++as_config) {
    const char* file = as_config ? "config.json" : "hf_quant_config.json";
    try {
      const QuantConfig qc = as_config ? parse_quant_config(nullptr, "", &j, file)
                                       : parse_quant_config(&j, file, nullptr, "");
      for (const char* m : {"backbone.layers.0.mixer.in_proj",
                            "backbone.layers.1.mixer.experts.0.up_proj", "lm_head"})
        try {
          (void)qc.resolve(m);
        } catch (const nemo::Error& e) {
          FUZZ_CHECK(names(e, file));
        }
    } catch (const nemo::Error& e) {
      FUZZ_CHECK(names(e, file));
    }
  }
  ModelConfig c;
  try {
    c = parse_model_config(j, "config.json");
  } catch (const nemo::Error& e) {
    FUZZ_CHECK(names(e, "config.json"));
    return Outcome::Rejected;
  }
  FUZZ_CHECK(!c.layers.empty() && c.hidden_size > 0 && c.vocab_size > 0);
  const nlohmann::json back = model_config_to_json(c);
  FUZZ_CHECK(model_config_to_json(parse_model_config(back, "config.json")) == back);
  return Outcome::Accepted;
}

}  // namespace nemo::io::fuzz
