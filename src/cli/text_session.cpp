#include <filesystem>
#include <optional>

#include "base/error.h"
#include "cli/commands.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace nemo::cli {

struct TextSession::Impl {
  std::optional<text::Tokenizer> tok;
  std::unique_ptr<text::StreamDecoder> dec;
  std::vector<std::string> stop;
  int64_t vocab = 0;
  // Byte fallback state
  std::string pending, emitted;
  bool stopped = false;

  // Fallback: keep output valid UTF-8 (hold an unfinished sequence, U+FFFD for invalid bytes)
  // and honour stop strings across tokens.
  std::string fallback_push(int32_t id, bool final) {
    if (id >= 0) {
      if (id < 256) pending.push_back(char(id));
      else pending += "<" + std::to_string(id) + ">";
    }
    std::string out;
    size_t i = 0;
    while (i < pending.size()) {
      const unsigned char c = static_cast<unsigned char>(pending[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      if (i + len > pending.size()) {
        if (!final) break;
        out += "\xEF\xBF\xBD";
        i = pending.size();
        break;
      }
      bool ok = true;
      for (size_t k = 1; k < len; ++k) ok &= (static_cast<unsigned char>(pending[i + k]) >> 6) == 2;
      if (!ok) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      out.append(pending, i, len);
      i += len;
    }
    pending.erase(0, i);
    return apply_stops(out, final);
  }
  std::string held;
  std::string apply_stops(const std::string& s, bool final) {
    held += s;
    for (const auto& st : stop) {
      const size_t p = st.empty() ? std::string::npos : held.find(st);
      if (p != std::string::npos) {
        stopped = true;
        std::string out = held.substr(0, p);
        held.clear();
        return out;
      }
    }
    // Keep back a tail that could still be the start of a stop string.
    size_t keep = 0;
    if (!final)
      for (const auto& st : stop)
        for (size_t n = std::min(st.size() - 1, held.size()); n > keep; --n)
          if (held.compare(held.size() - n, n, st, 0, n) == 0) {
            keep = n;
            break;
          }
    std::string out = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    return out;
  }
};

TextSession::TextSession(const std::string& dir, int64_t vocab, std::vector<std::string> stop)
    : impl_(std::make_unique<Impl>()) {
  impl_->vocab = vocab;
  impl_->stop = std::move(stop);
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    impl_->tok.emplace(text::Tokenizer::from_dir(dir));
    if (impl_->tok->vocab_size() > vocab)
      fail("{}: tokenizer.json has {} tokens but the model's vocabulary is {}", dir, impl_->tok->vocab_size(), vocab);
    impl_->dec = std::make_unique<text::StreamDecoder>(*impl_->tok, impl_->stop);
  } else if (vocab < 256) {
    fail("{}: no tokenizer.json, and the vocabulary ({}) is too small for the byte-level fallback", dir, vocab);
  }
}
TextSession::~TextSession() = default;

bool TextSession::has_tokenizer() const { return impl_->tok.has_value(); }
const void* TextSession::tokenizer() const { return impl_->tok ? &*impl_->tok : nullptr; }

std::vector<int32_t> TextSession::encode(const std::string& t) const {
  if (impl_->tok) return impl_->tok->encode(t);
  std::vector<int32_t> ids;
  for (unsigned char ch : t) ids.push_back(int32_t(ch));
  return ids;
}

std::string TextSession::push(int32_t token) {
  if (impl_->dec) return impl_->dec->push(token);
  return impl_->fallback_push(token, false);
}

std::string TextSession::finish() {
  std::string out;
  if (impl_->dec) {
    out = impl_->dec->finish();
    impl_->dec = std::make_unique<text::StreamDecoder>(*impl_->tok, impl_->stop);
  } else {
    out = impl_->fallback_push(-1, true);
    impl_->stopped = false;
  }
  return out;
}

bool TextSession::stopped() const { return impl_->dec ? impl_->dec->stopped() : impl_->stopped; }

std::vector<int32_t> TextSession::stop_token_ids() const {
  std::vector<int32_t> v;
  if (impl_->tok && impl_->tok->eos_id()) v.push_back(*impl_->tok->eos_id());
  return v;
}

}  // namespace nemo::cli
