#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"

namespace nemo::engine {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

GenerateStats Generator::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  if (req.prompt.empty()) fail("generate: the prompt is empty");
  GenerateStats s;
  s.prompt_tokens = int64_t(req.prompt.size());
  auto st = m_.new_state();
  Sampler sampler(req.sampling);
  const int64_t V = m_.config().vocab_size;
  double t0 = now_s();
  auto r = m_.forward(st, req.prompt, {}, tc_);
  s.prefill_seconds = now_s() - t0;
  t0 = now_s();
  for (int64_t i = 0; i < req.max_tokens; ++i) {
    const int32_t tok = sampler.sample({r.logits.data(), size_t(V)});
    ++s.generated_tokens;
    const bool stop = std::find(req.stop_tokens.begin(), req.stop_tokens.end(), tok) != req.stop_tokens.end();
    if (!on_token(tok) || stop) {
      s.stopped_by_token = stop;
      break;
    }
    if (i + 1 == req.max_tokens) break;
    const int32_t in[1] = {tok};
    r = m_.forward(st, in, {}, tc_);
  }
  s.decode_seconds = now_s() - t0;
  return s;
}

}  // namespace nemo::engine
