#include "text/bpe_trainer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "base/atomic_file.h"
#include "base/error.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace nemo::text {

using ojson = nlohmann::ordered_json;

namespace {
// Appends a key known to be new. ordered_json's operator[] searches linearly, which makes
// building a 131072-entry vocabulary quadratic; the callers guarantee uniqueness.
void append_new_key(ojson& obj, std::string key, ojson value) {
  auto& m = obj.get_ref<ojson::object_t&>();
  static_cast<std::vector<std::pair<const std::string, ojson>>&>(m).emplace_back(std::move(key), std::move(value));
}
}  // namespace

namespace {
constexpr std::string_view kSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string byte_level_string(std::string_view raw) {
  std::string s;
  for (unsigned char c : raw) utf8_append(s, byte_level_char(c));
  return s;
}

uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
}  // namespace

std::vector<std::string> nemotron_special_tokens() {
  std::vector<std::string> t = {"<unk>", "<s>", "</s>"};
  for (int i = 3; i <= 9; ++i) t.push_back("<SPECIAL_" + std::to_string(i) + ">");
  for (const char* s : {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                        "<tool_response>", "</tool_response>"})
    t.push_back(s);
  return t;
}

std::string train_byte_level_bpe(std::string_view corpus, int vocab_size,
                                 const std::vector<std::string>& special_tokens) {
  const int nspecial = int(special_tokens.size());
  if (vocab_size < nspecial + 256)
    fail("train_byte_level_bpe: vocab_size {} is smaller than {} special tokens + 256 bytes", vocab_size, nspecial);
  {
    std::unordered_set<std::string> seen;
    for (const auto& s : special_tokens)
      if (s.empty() || !seen.insert(s).second) fail("train_byte_level_bpe: empty or duplicate special token '{}'", s);
  }

  // Word frequencies from the same pre-tokenizer the tokenizer will use; special tokens
  // in the corpus are not learned from.
  Regex re(kSplitRegex, "train_byte_level_bpe split regex");
  Regex::Scratch scratch(re);
  std::map<std::string, int64_t> freq;  // ordered: deterministic word order
  size_t pos = 0;
  while (pos < corpus.size()) {
    size_t mb, me;
    if (!re.find(corpus, pos, scratch, mb, me)) break;
    if (me == mb) { ++pos; continue; }
    freq[std::string(corpus.substr(mb, me - mb))]++;
    pos = me;
  }

  // Symbols: ids [0, 256) = bytes (final id = nspecial + symbol).
  std::vector<std::string> tok_bytes(256);
  for (int b = 0; b < 256; ++b) tok_bytes[b] = std::string(1, char(b));
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  for (const auto& [w, c] : freq) {
    std::vector<int32_t> s;
    for (unsigned char ch : w) s.push_back(ch);
    words.push_back(std::move(s));
    counts.push_back(c);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // may hold stale entries
  auto add_word = [&](uint32_t wi, int64_t sign) {
    const auto& s = words[wi];
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      uint64_t p = key(s[k], s[k + 1]);
      pair_count[p] += sign * counts[wi];
      if (sign > 0) where[p].push_back(wi);
    }
  };
  for (uint32_t wi = 0; wi < words.size(); ++wi) add_word(wi, 1);

  struct Cand {
    int64_t count;
    uint64_t pair;
    bool operator<(const Cand& o) const {  // max count; ties: smallest pair ids
      return count != o.count ? count < o.count : pair > o.pair;
    }
  };
  std::priority_queue<Cand> heap;
  for (const auto& [p, c] : pair_count)
    if (c > 0) heap.push({c, p});

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int target_merges = vocab_size - nspecial - 256;
  while (int(merges.size()) < target_merges && !heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    auto it = pair_count.find(c.pair);
    if (it == pair_count.end() || it->second != c.count || c.count <= 0) continue;  // stale
    int32_t a = int32_t(c.pair >> 32), b = int32_t(c.pair & 0xFFFFFFFF);
    int32_t merged = int32_t(tok_bytes.size());
    tok_bytes.push_back(tok_bytes[a] + tok_bytes[b]);
    merges.emplace_back(a, b);
    std::vector<uint32_t> ws = std::move(where[c.pair]);
    where.erase(c.pair);
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    std::unordered_set<uint64_t> touched;
    for (uint32_t wi : ws) {
      auto& s = words[wi];
      bool has = false;
      for (size_t k = 0; k + 1 < s.size(); ++k)
        if (s[k] == a && s[k + 1] == b) { has = true; break; }
      if (!has) continue;
      for (size_t k = 0; k + 1 < s.size(); ++k) touched.insert(key(s[k], s[k + 1]));
      add_word(wi, -1);
      std::vector<int32_t> ns;
      for (size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
          ns.push_back(merged);
          ++k;
        } else {
          ns.push_back(s[k]);
        }
      }
      s = std::move(ns);
      add_word(wi, 1);
      for (size_t k = 0; k + 1 < s.size(); ++k) touched.insert(key(s[k], s[k + 1]));
    }
    pair_count.erase(c.pair);
    for (uint64_t p : touched) {
      auto pc = pair_count.find(p);
      if (pc != pair_count.end() && pc->second > 0) heap.push({pc->second, p});
    }
  }

  // Assemble tokenizer.json. A merged token whose byte string already exists (possible
  // when two different merge paths produce the same bytes) would collide in the vocab, so
  // the trainer never emits such merges: check and drop duplicates.
  ojson vocab = ojson::object();
  ojson added = ojson::array();
  int32_t id = 0;
  for (const auto& s : special_tokens) {
    append_new_key(vocab, s, id);
    added.push_back({{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    ++id;
  }
  std::vector<std::string> names(tok_bytes.size());
  std::unordered_set<std::string> used;
  for (const auto& s : special_tokens) used.insert(s);
  for (size_t k = 0; k < tok_bytes.size(); ++k) {
    names[k] = byte_level_string(tok_bytes[k]);
    if (!used.insert(names[k]).second) fail("train_byte_level_bpe: internal error: duplicate token {}", names[k]);
    append_new_key(vocab, names[k], id++);
  }
  ojson jm = ojson::array();
  for (auto [a, b] : merges) jm.push_back(ojson::array({names[a], names[b]}));
  for (int r = 0; id < vocab_size; ++r) {
    std::string s = "<|reserved_" + std::to_string(r) + "|>";
    if (used.count(s)) continue;
    append_new_key(vocab, s, id);
    added.push_back({{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    ++id;
  }
  ojson bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  ojson j = ojson::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         ojson::array({ojson{{"type", "Split"},
                                             {"pattern", {{"Regex", std::string(kSplitRegex)}}},
                                             {"behavior", "Isolated"},
                                             {"invert", false}},
                                       bl})}};
  j["post_processor"] = bl;
  j["decoder"] = bl;
  j["model"] = {{"type", "BPE"},         {"dropout", nullptr},    {"unk_token", nullptr},
                {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", jm}};
  return j.dump(1);
}

std::string make_tokenizer_config(const std::string& tokenizer_json, const TokenizerConfigOptions& o) {
  ojson tj = ojson::parse(tokenizer_json);
  ojson c = ojson::object();
  c["add_bos_token"] = o.add_bos_token;
  c["add_eos_token"] = o.add_eos_token;
  ojson dec = ojson::object();
  if (tj.contains("added_tokens"))
    for (const auto& t : tj["added_tokens"]) {
      ojson e = t;
      e.erase("id");
      append_new_key(dec, std::to_string(t["id"].get<int64_t>()), std::move(e));  // ids are unique
    }
  c["added_tokens_decoder"] = dec;
  auto opt = [](const std::optional<std::string>& s) { return s ? ojson(*s) : ojson(nullptr); };
  c["bos_token"] = opt(o.bos_token);
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = opt(o.eos_token);
  c["model_max_length"] = o.model_max_length;
  c["pad_token"] = opt(o.pad_token);
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  c["unk_token"] = opt(o.unk_token);
  if (o.chat_template) c["chat_template"] = *o.chat_template;
  // Validate: every named token must exist.
  for (const auto* s : {&o.bos_token, &o.eos_token, &o.pad_token, &o.unk_token})
    if (*s) {
      bool found = false;
      for (const auto& t : tj["added_tokens"]) found |= t["content"] == **s;
      if (!found && !(tj["model"]["vocab"].contains(**s)))
        fail("make_tokenizer_config: token {} is not in the vocabulary", **s);
    }
  return c.dump(2);
}

namespace {
#include "text/lightning_template.inc"
}

std::string_view nemotron_lightning_chat_template() { return kLightningTemplate; }

void write_tokenizer_dir(const std::string& dir, const std::string& tokenizer_json) {
  const std::filesystem::path d(dir);
  std::filesystem::create_directories(d);
  TokenizerConfigOptions to;
  to.chat_template = std::string(kLightningTemplate);
  write_file_atomic((d / "tokenizer.json").string(), tokenizer_json);
  write_file_atomic((d / "tokenizer_config.json").string(),
                    make_tokenizer_config(tokenizer_json, to));
  write_file_atomic((d / "chat_template.jinja").string(), kLightningTemplate);
}

}  // namespace nemo::text
