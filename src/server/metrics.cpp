#include "server/metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace nemo::server {

namespace {

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, const std::string& name, const char* type, const std::string& help,
            double v) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, v);
}

std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                     sum_, name, count_);
}

Metrics::Metrics()
    : ttft_(latency_bounds()), itl_(latency_bounds()), e2e_(latency_bounds()), queue_(latency_bounds()) {}

void Metrics::http_request(const std::string& route, int status) {
  std::lock_guard lk(mu_);
  ++http_[{route, status}];
}

void Metrics::request_done(const engine::RequestSummary& s, const std::vector<double>& itl) {
  std::lock_guard lk(mu_);
  ++finish_[engine::finish_reason_name(s.finish)];
  if (s.ttft_s > 0) ttft_.observe(s.ttft_s);
  for (double d : itl) itl_.observe(d);
  e2e_.observe(s.total_s);
  queue_.observe(s.queue_s);
}

void Metrics::disconnect() {
  std::lock_guard lk(mu_);
  ++disconnects_;
}

std::string Metrics::render(const engine::SchedulerMetrics* sm, bool ready, bool draining) const {
  std::string out;
  std::lock_guard lk(mu_);
  scalar(out, "nemotron:ready", "gauge", "1 once the model is loaded and warm", ready ? 1 : 0);
  scalar(out, "nemotron:draining", "gauge", "1 while shutting down (new requests get 503)", draining ? 1 : 0);
  header(out, "nemotron:http_requests_total", "counter", "HTTP requests by route and status code");
  for (const auto& [k, n] : http_)
    out += fmt::format("nemotron:http_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", k.first, k.second, n);
  header(out, "nemotron:request_success_total", "counter",
         "Generation requests finished, by finish reason (stop, length, cancelled, error)");
  for (const char* r : {"stop", "length", "cancelled", "error"}) {
    const auto it = finish_.find(r);
    out += fmt::format("nemotron:request_success_total{{finished_reason=\"{}\"}} {}\n", r,
                       it == finish_.end() ? 0 : it->second);
  }
  scalar(out, "nemotron:client_disconnects_total", "counter",
         "Streams whose client went away before the end (the request was cancelled)", double(disconnects_));
  ttft_.render(out, "nemotron:time_to_first_token_seconds", "Submit to first generated token");
  itl_.render(out, "nemotron:inter_token_latency_seconds",
              "Time between successive tokens as the server received them");
  e2e_.render(out, "nemotron:e2e_request_latency_seconds", "Submit to the end of the request");
  queue_.render(out, "nemotron:request_queue_time_seconds", "Time a request waited for a slot");
  if (!sm) return out;
  scalar(out, "nemotron:num_requests_running", "gauge", "Requests decoding now", double(sm->active));
  scalar(out, "nemotron:num_requests_waiting", "gauge", "Requests waiting in the queue", double(sm->queued));
  scalar(out, "nemotron:prompt_tokens_total", "counter", "Prompt tokens of finished requests",
         double(sm->prompt_tokens));
  scalar(out, "nemotron:prompt_tokens_cached_total", "counter",
         "Prompt tokens restored from the prefix cache", double(sm->cached_prompt_tokens));
  scalar(out, "nemotron:generation_tokens_total", "counter", "Generated tokens of finished requests",
         double(sm->generated_tokens));
  scalar(out, "nemotron:forward_passes_total", "counter", "Batched target forwards", double(sm->forward_passes));
  scalar(out, "nemotron:forward_rows_total", "counter", "Rows of the batched target forwards",
         double(sm->forward_rows));
  scalar(out, "nemotron:prefix_cache_hits_total", "counter", "Requests that reused a cached prefix",
         double(sm->prefix_cache_hits));
  scalar(out, "nemotron:prefix_cache_entries", "gauge", "Entries in the prefix cache",
         double(sm->prefix_cache_entries));
  scalar(out, "nemotron:prefix_cache_bytes", "gauge", "Bytes held by the prefix cache",
         double(sm->prefix_cache_bytes));
  const auto& sp = sm->spec;
  scalar(out, "vllm:spec_decode_num_drafts_total", "counter", "Speculative verify calls (draft proposals)",
         double(sp.rounds));
  scalar(out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed",
         double(sp.drafted));
  scalar(out, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted",
         double(sp.accepted));
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft tokens accepted at each draft position (0-based)");
  for (size_t i = 0; i < sp.accepted_at.size(); ++i)
    out += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i,
                       sp.accepted_at[i]);
  return out;
}

}  // namespace nemo::server
