#include "text/detokenizer.h"

#include "text/unicode.h"

namespace nemo::text {

std::pair<size_t, int> find_stop(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = std::string_view::npos;
  int idx = -1;
  for (size_t k = 0; k < stops.size(); ++k) {
    size_t p = text.find(stops[k]);
    if (p < best) {  // earliest wins; ties go to the first listed
      best = p;
      idx = int(k);
    }
  }
  return {best, idx};
}

size_t stop_prefix_suffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops) {
    size_t max = std::min(s.size() - 1, text.size());
    for (size_t len = max; len > best; --len)
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
  }
  return best;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, std::vector<std::string> stop_strings,
                             bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {
  for (auto& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StreamDecoder::release(std::string text, bool final) {
  std::string all = held_ + text;
  held_.clear();
  auto [pos, idx] = find_stop(all, stops_);
  if (idx >= 0) {
    stop_index_ = idx;
    all.resize(pos);
    raw_.clear();
    emitted_ += all;
    return all;
  }
  if (!final) {
    size_t keep = stop_prefix_suffix(all, stops_);
    held_ = all.substr(all.size() - keep);
    all.resize(all.size() - keep);
  }
  emitted_ += all;
  return all;
}

std::string StreamDecoder::push(int32_t id) {
  if (stopped()) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  raw_ += tok_.token_bytes(id, first_);
  first_ = false;
  size_t tail = utf8_incomplete_tail(raw_);
  std::string complete = utf8_lossy(std::string_view(raw_).substr(0, raw_.size() - tail));
  raw_.erase(0, raw_.size() - tail);
  return release(std::move(complete), false);
}

std::string StreamDecoder::finish() {
  if (stopped()) return {};
  std::string rest = utf8_lossy(raw_);
  raw_.clear();
  return release(std::move(rest), true);
}

}  // namespace nemo::text
