// Exact prefix reuse for the hybrid state. An entry is a snapshot of a sequence after the first
// `rows` prompt tokens — KV rows plus the Mamba conv/SSM states — taken only at multiples of the
// SSD chunk size during a prefill, with the drafter features of those rows. A later prompt that
// starts with those tokens resumes from the snapshot and continues the chunked scan, which is
// bitwise what a full prefill computes (tests/engine/test_scheduler.cpp). Bounded by bytes,
// least recently used out first. Not thread-safe: the scheduler's worker owns it.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "model/state.h"

namespace nemo::engine {

class PrefixCache {
 public:
  struct Entry {
    std::vector<int32_t> tokens;  // the prefix
    std::string feature_key;      // which drafter features ride along ("" = none)
    model::SequenceState state;
    std::vector<float> features;  // [rows, width]
    int64_t bytes = 0;
  };

  explicit PrefixCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  bool enabled() const { return max_bytes_ > 0; }

  // The longest entry that is a prefix of `prompt`, with feature_key `key` and at most
  // `max_rows` rows; null if none. Marks it most recently used.
  const Entry* find(std::span<const int32_t> prompt, const std::string& key, int64_t max_rows);
  // Stores a snapshot of `st` (whose first st.n_past() rows are `prompt`'s first ones) unless an
  // equal entry exists; evicts the least recently used entries beyond the byte budget.
  void insert(std::span<const int32_t> prompt, const std::string& key,
              const model::SequenceState& st, std::span<const float> features);

  int64_t entries() const { return int64_t(lru_.size()); }
  int64_t bytes() const { return bytes_; }
  int64_t hits() const { return hits_; }

 private:
  int64_t max_bytes_ = 0, bytes_ = 0, hits_ = 0;
  std::list<Entry> lru_;  // front = most recently used
};

}  // namespace nemo::engine
