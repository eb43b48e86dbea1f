// Text in and out for a model directory: its tokenizer.json when present, else a byte-level
// fallback (one token per byte; output kept valid UTF-8). TextCodec is the shared, read-only half
// (safe to use from many threads); TextStream is one stream's incremental detokenizer with stop
// strings; TextSession bundles both for single-stream callers (`nemotron run`).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace nemo::text {

class TextCodec {
 public:
  // Throws nemo::Error when tokenizer.json is larger than `vocab`, or when there is none and the
  // vocabulary is too small for bytes.
  TextCodec(const std::string& model_dir, int64_t vocab);
  TextCodec(TextCodec&&) noexcept;
  ~TextCodec();

  bool has_tokenizer() const { return tok_.has_value(); }
  const Tokenizer* tokenizer() const { return tok_ ? &*tok_ : nullptr; }
  int64_t vocab() const { return vocab_; }
  // Raw text, special tokens parsed; `add_special` applies the tokenizer's BOS/EOS policy.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Valid UTF-8 (ill-formed bytes become U+FFFD). Ids outside the vocabulary are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // One token's text on its own (for logprobs and /tokenize pieces).
  std::string piece(int32_t id) const { return decode({&id, 1}); }
  // One token's raw bytes (may be partial UTF-8; the fallback's id >= 256 reads "<id>").
  std::string piece_bytes(int32_t id) const;
  std::vector<int32_t> stop_token_ids() const;  // the tokenizer's EOS (chat end-of-turn), if any

 private:
  std::optional<Tokenizer> tok_;
  int64_t vocab_ = 0;
};

// One output stream: tokens in, final text out; nothing from a stop string on is ever emitted.
class TextStream {
 public:
  // `codec` must outlive the stream.
  TextStream(const TextCodec& codec, std::vector<std::string> stop = {}, bool skip_special = false);
  TextStream(TextStream&&) noexcept;
  ~TextStream();
  std::string push(int32_t token);  // text that became final
  std::string finish();             // flush at the end of a stream; resets for the next one
  bool stopped() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class TextSession {
 public:
  TextSession(const std::string& model_dir, int64_t vocab, std::vector<std::string> stop = {})
      : codec_(model_dir, vocab), stream_(codec_, std::move(stop)) {}
  bool has_tokenizer() const { return codec_.has_tokenizer(); }
  std::vector<int32_t> encode(const std::string& t) const { return codec_.encode(t); }
  std::string push(int32_t token) { return stream_.push(token); }
  std::string finish() { return stream_.finish(); }
  bool stopped() const { return stream_.stopped(); }
  std::vector<int32_t> stop_token_ids() const { return codec_.stop_token_ids(); }
  const TextCodec& codec() const { return codec_; }

 private:
  TextCodec codec_;
  TextStream stream_;
};

}  // namespace nemo::text
