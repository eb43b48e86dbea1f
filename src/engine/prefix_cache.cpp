#include "engine/prefix_cache.h"

#include <algorithm>

namespace nemo::engine {

namespace {
bool starts_with(std::span<const int32_t> s, std::span<const int32_t> prefix) {
  return prefix.size() <= s.size() && std::equal(prefix.begin(), prefix.end(), s.begin());
}
}  // namespace

const PrefixCache::Entry* PrefixCache::find(std::span<const int32_t> prompt, const std::string& key,
                                            int64_t max_rows) {
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->feature_key == key && int64_t(it->tokens.size()) <= max_rows &&
        (best == lru_.end() || it->tokens.size() > best->tokens.size()) &&
        starts_with(prompt, it->tokens))
      best = it;
  if (best == lru_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, best);
  ++hits_;
  return &lru_.front();
}

void PrefixCache::insert(std::span<const int32_t> prompt, const std::string& key,
                         const model::SequenceState& st, std::span<const float> features) {
  if (!enabled()) return;
  const std::span<const int32_t> prefix = prompt.first(size_t(st.n_past()));
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->feature_key == key &&
        std::equal(it->tokens.begin(), it->tokens.end(), prefix.begin(), prefix.end())) {
      lru_.splice(lru_.begin(), lru_, it);
      return;
    }
  Entry e;
  e.tokens.assign(prefix.begin(), prefix.end());
  e.feature_key = key;
  e.state = st.snapshot();
  e.features.assign(features.begin(), features.end());
  e.bytes = int64_t(e.state.bytes() + e.features.size() * sizeof(float) +
                    e.tokens.size() * sizeof(int32_t));
  if (e.bytes > max_bytes_) return;
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    lru_.pop_back();
  }
}

}  // namespace nemo::engine
