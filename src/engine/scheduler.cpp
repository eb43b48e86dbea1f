#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "model/mtp.h"

namespace nemo::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "?";
}

// ---- RequestStream ---------------------------------------------------------------------------

struct RequestStream::Sync {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenOut> pending;
  bool finished = false, cancel = false;
  RequestSummary summary;
};

std::shared_ptr<RequestStream::Sync> RequestStream::make_sync() { return std::make_shared<Sync>(); }

bool RequestStream::wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(sync_->mu);
  sync_->cv.wait_for(lk, timeout, [&] { return !sync_->pending.empty() || sync_->finished; });
  const bool any = !sync_->pending.empty() || sync_->finished;
  for (auto& t : sync_->pending) out.push_back(std::move(t));
  sync_->pending.clear();
  return any;
}
bool RequestStream::finished() const {
  std::lock_guard lk(sync_->mu);
  return sync_->finished && sync_->pending.empty();
}
RequestSummary RequestStream::summary() const {
  std::lock_guard lk(sync_->mu);
  return sync_->summary;
}
void RequestStream::cancel() {
  std::lock_guard lk(sync_->mu);
  sync_->cancel = true;
}
bool RequestStream::cancel_requested() const {
  std::lock_guard lk(sync_->mu);
  return sync_->cancel;
}
void RequestStream::push(TokenOut t) {
  {
    std::lock_guard lk(sync_->mu);
    sync_->pending.push_back(std::move(t));
  }
  sync_->cv.notify_all();
}
void RequestStream::finish(RequestSummary s) {
  {
    std::lock_guard lk(sync_->mu);
    sync_->summary = std::move(s);
    sync_->finished = true;
  }
  sync_->cv.notify_all();
}

// ---- Scheduler -------------------------------------------------------------------------------

namespace {

// log-softmax of one row: logprob of `token` and the n most likely (ties: lower id first).
void fill_logprobs(std::span<const float> row, int n, TokenOut& t) {
  float mx = -INFINITY;
  for (float v : row) mx = std::max(mx, v);
  double sum = 0;
  for (float v : row) sum += std::exp(double(v) - double(mx));
  const double lse = double(mx) + std::log(sum);
  t.logprob = float(double(row[size_t(t.token)]) - lse);
  if (n <= 0) return;
  std::vector<int32_t> ids(row.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  const size_t k = std::min(size_t(n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
    return row[size_t(a)] != row[size_t(b)] ? row[size_t(a)] > row[size_t(b)] : a < b;
  });
  for (size_t i = 0; i < k; ++i)
    t.top.emplace_back(ids[i], float(double(row[size_t(ids[i])]) - lse));
}

}  // namespace

struct Scheduler::Impl {
  struct Job {
    RequestOptions req;
    std::shared_ptr<RequestStream> stream;
    double t_submit = 0, t_admit = 0, t_first = 0;
    std::unique_ptr<Generator> gen;
  };

  const model::NemotronH& m;
  const SchedulerOptions& opt;
  mutable std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<Job> queue;
  std::vector<Job> active;
  bool stopping = false, draining = false;
  uint64_t next_id = 1;
  SchedulerMetrics totals;  // guarded by mu
  std::thread worker;

  Impl(const model::NemotronH& m_, const SchedulerOptions& o) : m(m_), opt(o) {
    worker = std::thread([this] { loop(); });
  }
  ~Impl() {
    {
      std::lock_guard lk(mu);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }

  void end(Job& j, FinishReason why, std::string error = {}) {
    RequestSummary s;
    s.finish = why;
    s.error = std::move(error);
    s.prompt_tokens = int64_t(j.req.prompt.size());
    if (j.gen) {
      s.completion_tokens = j.gen->stats().emitted;
      s.spec = j.gen->stats();
    }
    const double now = now_seconds();
    s.queue_s = (j.t_admit ? j.t_admit : now) - j.t_submit;
    s.ttft_s = j.t_first ? j.t_first - j.t_submit : 0.0;
    s.total_s = now - j.t_submit;
    {
      std::lock_guard lk(mu);
      ++totals.requests_finished;
      if (why == FinishReason::Cancelled) ++totals.requests_cancelled;
      if (why == FinishReason::Error) ++totals.requests_failed;
      totals.prompt_tokens += s.prompt_tokens;
      totals.generated_tokens += s.completion_tokens;
      if (j.gen) totals.spec.add(s.spec);
    }
    j.stream->finish(std::move(s));
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stopping || !queue.empty() || !active.empty(); });
        if (stopping) break;
        while (!queue.empty() && int(active.size()) < std::max(1, opt.max_active)) {
          active.push_back(std::move(queue.front()));
          queue.pop_front();
          active.back().t_admit = now_seconds();
        }
      }
      for (Job& j : active) step(j);
      {
        std::lock_guard lk(mu);
        std::erase_if(active, [](const Job& j) { return !j.stream; });
        if (queue.empty() && active.empty()) idle_cv.notify_all();
      }
    }
    for (Job& j : active) end(j, FinishReason::Cancelled);
    for (Job& j : queue) end(j, FinishReason::Cancelled);
    active.clear();
    queue.clear();
    idle_cv.notify_all();
  }

  void step(Job& j) {
    try {
      if (j.stream->cancel_requested()) {
        end(j, FinishReason::Cancelled);
        j.stream.reset();
        return;
      }
      if (!j.gen) {
        const SpecMode mode = j.req.spec.value_or(opt.spec);
        j.gen = std::make_unique<Generator>(m, opt.threads, mode, opt.draft_max,
                                            mode == SpecMode::None || mode == SpecMode::Mtp ||
                                                    mode == SpecMode::Ngram
                                                ? nullptr
                                                : opt.drafter);
        GenerateRequest g;
        g.prompt = j.req.prompt;
        g.max_tokens = j.req.max_tokens;
        g.sampling = j.req.sampling;
        g.stop_tokens = j.req.stop_tokens;
        j.gen->begin(std::move(g));
      }
      const std::span<const Emitted> out = j.gen->step();
      {
        std::lock_guard lk(mu);
        ++totals.forward_passes;
      }
      for (const Emitted& e : out) {
        TokenOut t;
        t.token = e.token;
        if (j.req.top_logprobs >= 0) fill_logprobs(e.logits, j.req.top_logprobs, t);
        if (!j.t_first) j.t_first = now_seconds();
        j.stream->push(std::move(t));
      }
      if (j.gen->done()) {
        const bool hit_stop = !out.empty() && std::find(j.req.stop_tokens.begin(),
                                                        j.req.stop_tokens.end(),
                                                        out.back().token) != j.req.stop_tokens.end();
        end(j, hit_stop ? FinishReason::Stop : FinishReason::Length);
        j.stream.reset();
      }
    } catch (const std::exception& e) {
      end(j, FinishReason::Error, e.what());
      j.stream.reset();
    }
  }
};

Scheduler::Scheduler(const model::NemotronH& m, SchedulerOptions opt) : m_(m), opt_(std::move(opt)) {
  // Resolve Auto once, the way Generator does (and fail early on an impossible mode).
  Generator probe(m_, opt_.threads, opt_.spec, opt_.draft_max,
                  opt_.spec == SpecMode::Auto || opt_.spec == SpecMode::DFlash ||
                          opt_.spec == SpecMode::DSpark
                      ? opt_.drafter
                      : nullptr);
  default_spec_ = probe.mode();
  opt_.spec = default_spec_;
  impl_ = std::make_unique<Impl>(m_, opt_);
}

Scheduler::~Scheduler() = default;

std::shared_ptr<RequestStream> Scheduler::submit(RequestOptions req, std::string* why,
                                                 Refusal* refusal) {
  auto refuse = [&](Refusal r, std::string msg) -> std::shared_ptr<RequestStream> {
    if (why) *why = std::move(msg);
    if (refusal) *refusal = r;
    return nullptr;
  };
  const int64_t V = m_.config().vocab_size;
  if (req.prompt.empty()) return refuse(Refusal::Invalid, "the prompt is empty");
  for (size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= V)
      return refuse(Refusal::Invalid, fmt::format("prompt token {} at position {} is outside the "
                                                  "vocabulary [0, {})",
                                                  req.prompt[i], i, V));
  if (req.max_tokens < 1) return refuse(Refusal::Invalid, "max_tokens must be at least 1");
  if (req.top_logprobs < -1 || req.top_logprobs > kMaxTopLogprobs)
    return refuse(Refusal::Invalid,
                  fmt::format("top_logprobs must be within [0, {}]", kMaxTopLogprobs));
  if (opt_.max_context > 0 && int64_t(req.prompt.size()) + req.max_tokens > opt_.max_context)
    return refuse(Refusal::Invalid,
                  fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context limit {}",
                              req.prompt.size(), req.max_tokens, opt_.max_context));
  if (req.spec) {
    const SpecMode s = *req.spec;
    if ((s == SpecMode::DFlash || s == SpecMode::DSpark) &&
        (!opt_.drafter || opt_.drafter->dspark() != (s == SpecMode::DSpark)))
      return refuse(Refusal::Invalid,
                    fmt::format("speculation '{}' needs that drafter loaded at startup",
                                spec_mode_name(s)));
    if (s == SpecMode::Mtp && !model::MtpHead::present(m_))
      return refuse(Refusal::Invalid, "speculation 'mtp' needs a checkpoint with an MTP module");
    if (s == SpecMode::Auto) req.spec = default_spec_;
  }
  std::lock_guard lk(impl_->mu);
  if (impl_->draining || impl_->stopping) return refuse(Refusal::Draining, "the server is shutting down");
  if (int(impl_->queue.size()) >= opt_.max_queue)
    return refuse(Refusal::QueueFull,
                  fmt::format("{} requests are already waiting (the queue limit)", opt_.max_queue));
  Impl::Job j;
  j.req = std::move(req);
  j.stream = std::make_shared<RequestStream>(impl_->next_id++);
  j.t_submit = now_seconds();
  auto s = j.stream;
  impl_->queue.push_back(std::move(j));
  impl_->cv.notify_all();
  return s;
}

void Scheduler::drain() {
  std::unique_lock lk(impl_->mu);
  impl_->draining = true;
  impl_->idle_cv.wait(lk, [&] {
    return impl_->stopping || (impl_->queue.empty() && impl_->active.empty());
  });
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard lk(impl_->mu);
  SchedulerMetrics m = impl_->totals;
  m.queued = int64_t(impl_->queue.size());
  m.active = int64_t(impl_->active.size());
  return m;
}

}  // namespace nemo::engine
