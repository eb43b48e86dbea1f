// The serving scheduler: many requests decoding together. One worker thread runs the loop
//   admit queued requests (restoring the longest exact prefix from the prefix cache)
//   → every active request plans its rows (a prompt piece, a decode row, or [anchor, drafts])
//   → ONE batched target forward over all of them (model::NemotronH::forward_batch)
//   → every request completes its step (sampling / verification) and its tokens are streamed.
// Kernels are batch-invariant, so a request's tokens and logits are bitwise what it would get
// alone (tests/engine/test_scheduler.cpp). Consumers (the HTTP server, `chat`) read tokens from
// a RequestStream, thread-safely, and cancel through it.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/generator.h"

namespace nemo::engine {

struct RequestOptions {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // ends after emitting one of these (finish: stop)
  // Log-probabilities (log-softmax of the target's logits row) of each emitted token: -1 = none,
  // 0 = the chosen token's only, n = also the n most likely (n <= kMaxTopLogprobs).
  int top_logprobs = -1;
  // Speculation for this request: nullopt = the scheduler's mode; SpecMode::None turns it off.
  std::optional<SpecMode> spec;
  bool use_prefix_cache = true;
};

struct TokenOut {
  int32_t token = 0;
  float logprob = 0.0f;                        // when top_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop" | "length" | "cancelled" | "error"

struct RequestSummary {
  FinishReason finish = FinishReason::Stop;
  std::string error;  // FinishReason::Error: what failed
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double queue_s = 0;  // submit → admitted
  double ttft_s = 0;   // submit → first token
  double total_s = 0;  // submit → finished
  speculative::SpecStats spec;
};

// One request's output, shared between the scheduler (producer) and one consumer.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }
  // Moves tokens produced since the last call into `out` (appending). Waits up to `timeout`
  // while there is nothing new and the request has not finished. True when something new
  // arrived or the request has finished.
  bool wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout);
  bool finished() const;
  RequestSummary summary() const;  // final once finished()
  // Asks the scheduler to stop the request (finish: cancelled) at its next step.
  void cancel();
  bool cancel_requested() const;

  // Producer side (the scheduler).
  void push(TokenOut t);
  void finish(RequestSummary s);

 private:
  struct Sync;
  uint64_t id_;
  std::shared_ptr<Sync> sync_ = make_sync();
  static std::shared_ptr<Sync> make_sync();
};

struct SchedulerOptions {
  ThreadConfig threads;
  SpecMode spec = SpecMode::None;  // default for requests (Auto resolves as in Generator)
  int draft_max = 0;               // 0: the drafter's default
  const model::DFlashModel* drafter = nullptr;
  int max_active = 16;                       // sequences that decode together
  int max_queue = 64;                        // waiting requests; submit refuses beyond (HTTP 429)
  int64_t max_context = 0;                   // prompt + max_tokens; 0 = unlimited
  int64_t prefill_piece = 256;               // prompt rows per step (rounded to the SSD chunk size)
  int64_t prefix_cache_bytes = 256ll << 20;  // 0 = off
};

struct SchedulerMetrics {
  int64_t queued = 0, active = 0;
  int64_t requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
  int64_t forward_passes = 0, forward_rows = 0;  // batched target forwards and their rows
  int64_t prefix_cache_entries = 0, prefix_cache_bytes = 0, prefix_cache_hits = 0;
  speculative::SpecStats spec;  // summed over finished requests (per position included)
};

class Scheduler {
 public:
  static constexpr int kMaxTopLogprobs = 20;

  Scheduler(const model::NemotronH& m, SchedulerOptions opt);
  ~Scheduler();  // cancels what is left and joins the worker
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Null (with `why`) when the queue is full, the scheduler is draining, or
  // the request is invalid (empty prompt, token outside the vocabulary, over max_context, bad
  // top_logprobs, a speculation mode the model cannot run).
  enum class Refusal { None, QueueFull, Draining, Invalid };
  std::shared_ptr<RequestStream> submit(RequestOptions req, std::string* why = nullptr,
                                        Refusal* refusal = nullptr);
  // Stops admitting new requests and waits until every queued and active one has finished.
  void drain();
  SchedulerMetrics metrics() const;
  const SchedulerOptions& options() const { return opt_; }
  SpecMode default_spec() const { return default_spec_; }  // Auto resolved

 private:
  struct Impl;
  const model::NemotronH& m_;
  SchedulerOptions opt_;
  SpecMode default_spec_ = SpecMode::None;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::engine
