#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "engine/prefix_cache.h"
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

std::shared_ptr<RequestStream::Sync> RequestStream::make_sync() {
  return std::make_shared<Sync>();
}

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

// The external drafter a Generator in `mode` is given: the loaded one for the modes that use it
// (Auto picks it when present), none otherwise (Generator refuses a drafter it cannot use).
const model::DFlashModel* drafter_for(SpecMode mode, const model::DFlashModel* loaded) {
  const bool uses = mode == SpecMode::Auto || mode == SpecMode::DFlash || mode == SpecMode::DSpark;
  return uses ? loaded : nullptr;
}

}  // namespace

struct Scheduler::Impl {
  struct Job {
    RequestOptions req;
    std::shared_ptr<RequestStream> stream;
    double t_submit = 0, t_admit = 0, t_first = 0;
    std::unique_ptr<Generator> gen;
    int64_t cached = 0;  // prompt rows restored from the prefix cache
    bool ended = false;
  };

  const model::NemotronH& m;
  const SchedulerOptions& opt;
  const int64_t chunk;  // the SSD chunk size: snapshots only at its multiples
  mutable std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<Job> queue;    // guarded by mu
  std::vector<Job> active;  // the worker's; its size is published under mu
  bool stopping = false, draining = false;
  uint64_t next_id = 1;
  SchedulerMetrics totals;  // guarded by mu
  PrefixCache cache;        // the worker's
  std::thread worker;

  Impl(const model::NemotronH& m_, const SchedulerOptions& o)
      : m(m_), opt(o), chunk(m_.config().chunk_size), cache(o.prefix_cache_bytes) {
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
    if (j.ended) return;
    j.ended = true;
    RequestSummary s;
    s.finish = why;
    s.error = std::move(error);
    s.prompt_tokens = int64_t(j.req.prompt.size());
    s.cached_tokens = j.cached;
    if (j.gen) {
      j.gen->cancel();
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
      totals.cached_prompt_tokens += s.cached_tokens;
      totals.generated_tokens += s.completion_tokens;
      if (j.gen) totals.spec.add(s.spec);
    }
    j.stream->finish(std::move(s));
    j.gen.reset();  // frees the sequence state now, not when the slot is reused
  }

  // A new request's Generator, resuming from the longest exact cached prefix of its prompt.
  void start(Job& j) {
    // A default of Auto reaches the Generator as Auto (it resolves it as default_spec_ was, then
    // adapts the draft length of greedy requests that run alone).
    const SpecMode mode = j.req.spec.value_or(opt.spec);
    j.gen = std::make_unique<Generator>(m, opt.threads, mode, opt.draft_max,
                                        drafter_for(mode, opt.drafter));
    GenerateRequest g;
    g.prompt = j.req.prompt;
    g.max_tokens = j.req.max_tokens;
    g.sampling = j.req.sampling;
    g.stop_tokens = j.req.stop_tokens;
    g.prefill_piece = std::max<int64_t>(chunk, opt.prefill_piece / chunk * chunk);
    const int64_t N = int64_t(g.prompt.size());
    RestoredPrefix pre;
    if (cacheable(j) && N > chunk) {
      const int64_t max_rows = (N - 1) / chunk * chunk;
      if (const PrefixCache::Entry* e = cache.find(g.prompt, j.gen->feature_key(), max_rows)) {
        pre.rows = int64_t(e->tokens.size());
        pre.state = &e->state;
        pre.features = e->features;
        j.cached = pre.rows;
      }
    }
    j.gen->begin(std::move(g), pre.rows ? &pre : nullptr);
  }

  bool cacheable(const Job& j) const {
    return cache.enabled() && j.req.use_prefix_cache &&
           int64_t(j.req.prompt.size()) >= model::ForwardOptions{}.ssd_min_rows;
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
        totals.active = int64_t(active.size());
      }
      step_all();
      {
        std::lock_guard lk(mu);
        std::erase_if(active, [](const Job& j) { return j.ended; });
        totals.active = int64_t(active.size());
        totals.prefix_cache_entries = cache.entries();
        totals.prefix_cache_bytes = cache.bytes();
        totals.prefix_cache_hits = cache.hits();
        if (queue.empty() && active.empty()) idle_cv.notify_all();
      }
    }
    for (Job& j : active) end(j, FinishReason::Cancelled);
    for (Job& j : queue) end(j, FinishReason::Cancelled);
    std::lock_guard lk(mu);
    active.clear();
    queue.clear();
    idle_cv.notify_all();
  }

  // One step of every active request, their forwards batched into one pass.
  void step_all() {
    std::vector<Job*> planned;
    std::vector<model::BatchItem> items;
    // A request alone in the pass times its rounds (--spec auto's draft length policy).
    const bool alone = active.size() == 1;
    for (Job& j : active) {
      if (j.stream->cancel_requested()) {
        end(j, FinishReason::Cancelled);
        continue;
      }
      try {
        if (!j.gen) start(j);
        model::BatchItem item;
        if (!j.gen->plan(item, alone)) {
          end(j, FinishReason::Length);
          continue;
        }
        planned.push_back(&j);
        items.push_back(item);
      } catch (const std::exception& e) {
        end(j, FinishReason::Error, e.what());
      }
    }
    if (items.empty()) return;
    std::vector<model::ForwardResult> results;
    try {
      results = m.forward_batch(items, opt.threads);
    } catch (const std::exception& e) {
      for (Job* j : planned) end(*j, FinishReason::Error, e.what());
      return;
    }
    int64_t rows = 0;
    for (const auto& it : items) rows += int64_t(it.tokens.size());
    {
      std::lock_guard lk(mu);
      ++totals.forward_passes;
      totals.forward_rows += rows;
    }
    for (size_t i = 0; i < planned.size(); ++i) complete(*planned[i], std::move(results[i]));
  }

  void complete(Job& j, model::ForwardResult r) {
    try {
      Generator& g = *j.gen;
      const bool was_prefilling = g.prefilling();
      const std::span<const Emitted> out = g.complete(std::move(r));
      // A prefill piece ending on a chunk boundary: an exact snapshot for later prompts.
      if (was_prefilling && cacheable(j) && g.prompt_rows_done() % chunk == 0)
        cache.insert(j.req.prompt, g.feature_key(), g.state(), g.prompt_features());
      for (const Emitted& e : out) {
        TokenOut t;
        t.token = e.token;
        if (j.req.top_logprobs >= 0) fill_logprobs(e.logits, j.req.top_logprobs, t);
        if (!j.t_first) j.t_first = now_seconds();
        j.stream->push(std::move(t));
      }
      if (g.done()) {
        const bool hit_stop =
            !out.empty() && std::find(j.req.stop_tokens.begin(), j.req.stop_tokens.end(),
                                      out.back().token) != j.req.stop_tokens.end();
        end(j, hit_stop ? FinishReason::Stop : FinishReason::Length);
      }
    } catch (const std::exception& e) {
      end(j, FinishReason::Error, e.what());
    }
  }
};

Scheduler::Scheduler(const model::NemotronH& m, SchedulerOptions opt)
    : m_(m), opt_(std::move(opt)) {
  // Resolve Auto once, the way Generator does (and fail early on an impossible mode); opt_.spec
  // keeps Auto, which each request's Generator resolves the same way.
  Generator probe(m_, opt_.threads, opt_.spec, opt_.draft_max,
                  drafter_for(opt_.spec, opt_.drafter));
  default_spec_ = probe.mode();
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
      return refuse(
          Refusal::Invalid,
          fmt::format("speculation '{}' needs that drafter loaded at startup", spec_mode_name(s)));
    if (s == SpecMode::Mtp && !model::MtpHead::present(m_))
      return refuse(Refusal::Invalid, "speculation 'mtp' needs a checkpoint with an MTP module");
    if (s == SpecMode::Auto) req.spec.reset();  // the default, adaptive where it was Auto
  }
  std::lock_guard lk(impl_->mu);
  if (impl_->draining || impl_->stopping)
    return refuse(Refusal::Draining, "the server is shutting down");
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
  impl_->idle_cv.wait(
      lk, [&] { return impl_->stopping || (impl_->queue.empty() && impl_->totals.active == 0); });
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard lk(impl_->mu);
  SchedulerMetrics m = impl_->totals;
  m.queued = int64_t(impl_->queue.size());
  return m;
}

}  // namespace nemo::engine
