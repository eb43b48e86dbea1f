// Single-sequence generation with optional speculative decoding: picks the drafter (MTP when the
// checkpoint has one, n-gram, or none), runs the verify loop, streams tokens to a callback and
// keeps cumulative speculative telemetry.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/nemotron_h.h"
#include "spec/drafter.h"
#include "spec/sampler.h"
#include "spec/speculative.h"

namespace nemo::engine {

enum class SpecMode { Auto, None, Mtp, Ngram };
SpecMode parse_spec_mode(const std::string& s);  // auto | none | mtp | ngram
const char* spec_mode_name(SpecMode m);

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  spec::SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  spec::SpecStats spec;
};

// Called once per generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

class Generator {
 public:
  // Auto: MTP if the checkpoint carries it, else none. Mtp without an MTP module is an error.
  Generator(const model::NemotronH& m, ThreadConfig tc, SpecMode mode = SpecMode::None, int draft_max = 3);
  GenerateStats generate(const GenerateRequest& req, const TokenCallback& on_token);
  SpecMode mode() const { return mode_; }
  int draft_max() const { return draft_max_; }
  const spec::SpecStats& cumulative() const { return total_; }

 private:
  const model::NemotronH& m_;
  ThreadConfig tc_;
  SpecMode mode_;
  int draft_max_;
  std::unique_ptr<spec::Drafter> drafter_;
  spec::SpecStats total_;
};

}  // namespace nemo::engine
