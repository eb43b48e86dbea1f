// Streaming detokenizer: turns token ids into text as they arrive.
//  * never emits a partial UTF-8 sequence (bytes are held until the character completes;
//    ill-formed bytes become U+FFFD);
//  * handles byte-fallback (<0xXX>) and byte-level tokens that split characters;
//  * stop strings may span token boundaries: text that could still be the start of a stop
//    string is held back, and nothing from the stop string on is ever emitted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace nemo::text {

class StreamDecoder {
 public:
  // `tok` must outlive the decoder. Empty stop strings are ignored.
  StreamDecoder(const Tokenizer& tok, std::vector<std::string> stop_strings = {},
                bool skip_special_tokens = false);

  // Feeds one token; returns the text that became final (possibly empty).
  std::string push(int32_t id);
  // End of stream: releases held text (an unfinished UTF-8 sequence becomes U+FFFD).
  std::string finish();

  bool stopped() const { return stop_index_ >= 0; }
  // Index into the stop strings of the one that matched, or -1.
  int stop_index() const { return stop_index_; }
  // Total text emitted so far.
  const std::string& text() const { return emitted_; }

 private:
  std::string release(std::string text, bool final);

  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  bool skip_special_;
  bool first_ = true;
  std::string raw_;   // bytes of an unfinished UTF-8 sequence
  std::string held_;  // valid text that may be the start of a stop string
  std::string emitted_;
  int stop_index_ = -1;
};

// Earliest match of any stop string in `text`: returns {position, index} or {npos, -1}.
std::pair<size_t, int> find_stop(std::string_view text, const std::vector<std::string>& stops);
// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t stop_prefix_suffix(std::string_view text, const std::vector<std::string>& stops);

}  // namespace nemo::text
