#include "text/text_session.h"

#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"
#include "text/detokenizer.h"

namespace nemo::text {

namespace {

// Length of the UTF-8 sequence a lead byte starts, 0 if it cannot start one.
size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
}

// Appends the valid UTF-8 prefix of `in` to `out` (U+FFFD per ill-formed byte); returns how many
// bytes were consumed. An unfinished sequence at the end is kept back unless `final`.
size_t take_utf8(std::string_view in, bool final, std::string& out) {
  size_t i = 0;
  while (i < in.size()) {
    const size_t len = utf8_len(static_cast<unsigned char>(in[i]));
    bool ok = len != 0;
    if (ok && i + len > in.size()) {
      if (!final) break;
      ok = false;
    }
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(in[i + k]) >> 6) == 2;
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(in, i, len);
    i += len;
  }
  return i;
}

}  // namespace

TextCodec::TextCodec(const std::string& dir, int64_t vocab) : vocab_(vocab) {
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    tok_.emplace(Tokenizer::from_dir(dir));
    if (tok_->vocab_size() > vocab)
      fail("{}: tokenizer.json has {} tokens but the model's vocabulary is {}", dir,
           tok_->vocab_size(), vocab);
  } else if (vocab < 256) {
    fail("{}: no tokenizer.json, and the vocabulary ({}) is too small for the byte-level fallback",
         dir, vocab);
  }
}
TextCodec::TextCodec(TextCodec&&) noexcept = default;
TextCodec::~TextCodec() = default;

std::vector<int32_t> TextCodec::encode(std::string_view t, bool add_special) const {
  if (tok_) return tok_->encode(t, {.add_special_tokens = add_special});
  std::vector<int32_t> ids;
  ids.reserve(t.size());
  for (unsigned char ch : t) ids.push_back(int32_t(ch));
  return ids;
}

std::string TextCodec::piece_bytes(int32_t id) const {
  if (tok_) return tok_->token_bytes(id);
  if (id >= 0 && id < 256) return std::string(1, char(id));
  return fmt::format("<{}>", id);
}

std::string TextCodec::decode(std::span<const int32_t> ids, bool skip_special) const {
  if (tok_) return tok_->decode(ids, {.skip_special_tokens = skip_special, .clean_up_tokenization_spaces = {}});
  std::string raw, out;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_) raw += piece_bytes(id);
  take_utf8(raw, true, out);
  return out;
}

std::vector<int32_t> TextCodec::stop_token_ids() const {
  std::vector<int32_t> v;
  if (tok_ && tok_->eos_id()) v.push_back(*tok_->eos_id());
  return v;
}

// ---- TextStream ------------------------------------------------------------------------------

struct TextStream::Impl {
  const TextCodec& codec;
  std::vector<std::string> stop;
  bool skip_special;
  std::unique_ptr<StreamDecoder> dec;  // with a tokenizer
  // Byte fallback: bytes of an unfinished UTF-8 sequence, and text that may start a stop string.
  std::string pending, held;
  bool stopped = false;

  Impl(const TextCodec& c, std::vector<std::string> s, bool skip)
      : codec(c), stop(std::move(s)), skip_special(skip) {
    std::erase_if(stop, [](const std::string& x) { return x.empty(); });
    reset();
  }
  void reset() {
    if (codec.tokenizer())
      dec = std::make_unique<StreamDecoder>(*codec.tokenizer(), stop, skip_special);
    pending.clear();
    held.clear();
    stopped = false;
  }

  std::string fallback_push(int32_t id, bool final) {
    if (stopped) return {};
    if (id >= 0) pending += codec.piece_bytes(id);
    pending.erase(0, take_utf8(pending, final, held));
    if (const auto [pos, idx] = find_stop(held, stop); idx >= 0) {
      stopped = true;
      std::string out = held.substr(0, pos);
      held.clear();
      return out;
    }
    const size_t keep = final ? 0 : stop_prefix_suffix(held, stop);
    std::string out = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    return out;
  }
};

TextStream::TextStream(const TextCodec& codec, std::vector<std::string> stop, bool skip_special)
    : impl_(std::make_unique<Impl>(codec, std::move(stop), skip_special)) {}
TextStream::TextStream(TextStream&&) noexcept = default;
TextStream::~TextStream() = default;

std::string TextStream::push(int32_t token) {
  if (impl_->dec) return impl_->dec->push(token);
  return impl_->fallback_push(token, false);
}

std::string TextStream::finish() {
  std::string out = impl_->dec ? impl_->dec->finish() : impl_->fallback_push(-1, true);
  impl_->reset();
  return out;
}

bool TextStream::stopped() const {
  return impl_->dec ? impl_->dec->stopped() : impl_->stopped;
}

}  // namespace nemo::text
