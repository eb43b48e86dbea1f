// Hugging Face `tokenizer.json` tokenizer (byte-level BPE family) with encode and decode.
//
// Supported components (anything else fails at load time with an error naming the field):
//   normalizer:    NFC, NFD, Replace, Prepend, Strip, Sequence, null
//   pre_tokenizer: Split (String/Regex pattern, all behaviours, invert), ByteLevel, Digits,
//                  Sequence, null
//   model:         BPE (merges as "a b" or ["a","b"], byte_fallback, ignore_merges, unk_token,
//                  fuse_unk)
//   post_processor: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, Sequence
//   decoder:       ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence
// Regexes follow the Rust crate's Oniguruma semantics via PCRE2 (UTF + UCP, JIT); `\s`/`\S`
// are rewritten to Unicode White_Space. Input need not be valid UTF-8: ill-formed bytes never
// match a regex class and, with ByteLevel, still encode losslessly.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::text {

struct EncodeOptions {
  bool add_special_tokens = true;  // apply the BOS/EOS policy (post-processor / config)
  bool parse_special = true;       // false: special added tokens in the text are plain text
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // nullopt: use tokenizer_config.json's clean_up_tokenization_spaces (default false).
  std::optional<bool> clean_up_tokenization_spaces;
};

struct AddedTokenInfo {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

class Tokenizer {
 public:
  // Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json`.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // `config_json` may be empty. `source` names the input in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Never throws on any byte string.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  void encode_into(std::string_view text, std::vector<int32_t>& out,
                   const EncodeOptions& opts = {}) const;
  // Returns valid UTF-8 (ill-formed byte runs become U+FFFD). Unknown ids are skipped.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& opts = {}) const;
  // Raw bytes of one token as a streaming decoder should emit them (may be partial UTF-8);
  // `first` applies decoder rules for the first token of a sequence (e.g. Strip/Metaspace).
  std::string token_bytes(int32_t id, bool first = false) const;

  int32_t vocab_size() const;  // max id + 1
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedTokenInfo>& added_tokens() const;

  // From tokenizer_config.json (bos_token / eos_token / pad_token / unk_token).
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> unk_id() const;
  // The chat template embedded in tokenizer_config.json, if any.
  const std::optional<std::string>& config_chat_template() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPT-2 byte <-> printable code point mapping used by ByteLevel.
char32_t byte_level_char(uint8_t b);

}  // namespace nemo::text
