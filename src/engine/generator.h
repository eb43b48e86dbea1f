// Single-sequence generation: prefill, then decode token by token with a sampler, streaming each
// token to a callback. (Speculative decoding plugs in here; see the spec layer.)
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/nemotron_h.h"

namespace nemo::engine {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  bool stopped_by_token = false;
};

// Called once per generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

class Generator {
 public:
  Generator(const model::NemotronH& m, ThreadConfig tc) : m_(m), tc_(tc) {}
  GenerateStats generate(const GenerateRequest& req, const TokenCallback& on_token);

 private:
  const model::NemotronH& m_;
  ThreadConfig tc_;
};

}  // namespace nemo::engine
