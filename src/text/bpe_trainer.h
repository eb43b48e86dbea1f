// Deterministic byte-level BPE trainer producing a real Hugging Face `tokenizer.json`
// (Qwen2-style Split regex + ByteLevel, BPE merges, added special tokens), plus the matching
// tokenizer_config.json. Used to make synthetic model directories complete and chat-capable.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::text {

// Special tokens for synthetic Nemotron-style checkpoints, in id order: <unk> 0, <s> 1,
// </s> 2, <SPECIAL_3..9>, <|im_start|> 10, <|im_end|> 11, then <think>, </think>,
// <tool_call>, </tool_call>, <tool_response>, </tool_response>.
std::vector<std::string> nemotron_special_tokens();

// Trains on `corpus` and returns tokenizer.json text. Ids: special tokens first (in the
// given order), then the 256 byte tokens, then one token per merge. The vocabulary has
// exactly `vocab_size` entries: if the corpus runs out of pairs to merge, the rest is
// filled with `<|reserved_N|>` special tokens. Throws if vocab_size < specials + 256.
std::string train_byte_level_bpe(std::string_view corpus, int vocab_size,
                                 const std::vector<std::string>& special_tokens);

struct TokenizerConfigOptions {
  std::optional<std::string> bos_token = "<s>";
  std::optional<std::string> eos_token = "<|im_end|>";
  std::optional<std::string> pad_token = "<unk>";
  std::optional<std::string> unk_token = "<unk>";
  bool add_bos_token = false;
  bool add_eos_token = false;
  int64_t model_max_length = 262144;
  std::optional<std::string> chat_template;  // embedded if set (also write chat_template.jinja)
};

// tokenizer_config.json text matching a tokenizer.json from train_byte_level_bpe.
std::string make_tokenizer_config(const std::string& tokenizer_json, const TokenizerConfigOptions& opts = {});

// Writes DIR/tokenizer.json, tokenizer_config.json (with the Lightning chat template) and
// chat_template.jinja for a tokenizer.json from train_byte_level_bpe, each complete or absent.
void write_tokenizer_dir(const std::string& dir, const std::string& tokenizer_json);

// The Nemotron 3.5 Lightning chat template (byte-identical copy, embedded in the library).
std::string_view nemotron_lightning_chat_template();

}  // namespace nemo::text
