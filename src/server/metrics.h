// Prometheus metrics of the server: HTTP requests by route and status, latency histograms
// (time to first token, inter-token latency, end-to-end, queue time), and — read from the
// scheduler at scrape time — queue depth, tokens, prefix-cache and speculation counters, the
// latter under vLLM's names (vllm:spec_decode_*). Thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"

namespace nemo::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // # HELP / # TYPE, NAME_bucket{le=...} (cumulative, ending with +Inf), NAME_sum, NAME_count.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void http_request(const std::string& route, int status);
  // One finished generation request, as its stream saw it.
  void request_done(const engine::RequestSummary& s, const std::vector<double>& inter_token_s);
  void disconnect();  // a client went away before its response was complete
  // The exposition text (format 0.0.4).
  std::string render(const engine::SchedulerMetrics* sched, bool ready, bool draining) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> http_;
  std::map<std::string, int64_t> finish_;
  int64_t disconnects_ = 0;
  Histogram ttft_, itl_, e2e_, queue_;
};

}  // namespace nemo::server
