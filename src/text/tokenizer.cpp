#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace nemo::text {

using json = nlohmann::json;

namespace {
// Token ids index dense tables (id -> token): a stray huge id in a corrupt tokenizer.json must
// fail to load, not allocate gigabytes. Real vocabularies are below 2^18.
constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

// ---------------------------------------------------------------- small utilities

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Open-addressing map from a (left, right) id pair to (rank, merged id).
class PairMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {});
    mask_ = cap - 1;
  }
  bool insert(uint64_t key, int32_t rank, int32_t id) {  // false if present
    size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return false;
      i = (i + 1) & mask_;
    }
    keys_[i] = key;
    vals_[i] = {rank, id};
    return true;
  }
  // rank < 0 when absent
  std::pair<int32_t, int32_t> find(uint64_t key) const {
    size_t i = hash(key) & mask_;
    while (true) {
      uint64_t k = keys_[i];
      if (k == key) return vals_[i];
      if (k == kEmpty) return {-1, -1};
      i = (i + 1) & mask_;
    }
  }
  static uint64_t make_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 17); }
  std::vector<uint64_t> keys_{kEmpty};
  std::vector<std::pair<int32_t, int32_t>> vals_{{-1, -1}};
  size_t mask_ = 0;
};

struct ByteLevelTables {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteLevelTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : char32_t(256 + n++);
      to_byte[to_char[b]] = uint8_t(b);
    }
  }
};
const ByteLevelTables& byte_level() {
  static const ByteLevelTables t;  // immutable table
  return t;
}

// HF's ByteFallback decoder: a token "<0xHH>" is the byte u8::from_str_radix(HH, 16), which
// takes two hex digits of either case, or '+' and one; anything else stays text.
std::optional<char> byte_fallback_byte(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return std::nullopt;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (lo < 0 || (hi < 0 && t[3] != '+')) return std::nullopt;
  return char(hi < 0 ? lo : hi * 16 + lo);
}

// Byte-level token string -> raw bytes; nullopt if a char is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view tok) {
  const auto& bl = byte_level();
  std::string out;
  out.reserve(tok.size());
  for (size_t i = 0; i < tok.size();) {
    char32_t cp;
    i += utf8_next(tok, i, cp);
    auto it = bl.to_byte.find(cp);
    if (it == bl.to_byte.end()) return std::nullopt;
    out.push_back(char(it->second));
  }
  return out;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("cannot open {}", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------- JSON access with field paths

const json& need(const json& j, const char* key, const std::string& path) {
  if (!j.is_object()) fail("{}: expected an object", path);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail("{}.{}: missing", path, key);
  return *it;
}
std::string need_str(const json& j, const char* key, const std::string& path) {
  const json& v = need(j, key, path);
  if (!v.is_string()) fail("{}.{}: expected a string", path, key);
  return v.get<std::string>();
}
bool opt_bool(const json& j, const char* key, bool def, const std::string& path) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail("{}.{}: expected a boolean", path, key);
  return it->get<bool>();
}
std::string opt_str(const json& j, const char* key, const std::string& path) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) fail("{}.{}: expected a string", path, key);
  return it->get<std::string>();
}
std::string type_of(const json& j, const std::string& path) {
  return need_str(j, "type", path);
}

// A token name in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.is_object()) return std::nullopt;
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// ---------------------------------------------------------------- pipeline components

enum class NormKind { NFC, NFD, Replace, Prepend, Strip };
struct Normalizer {
  NormKind kind;
  std::string pattern, content;  // Replace (String pattern) / Prepend
  std::optional<Regex> regex;    // Replace (Regex pattern)
  bool left = false, right = false;
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PreKind { Split, ByteLevel };
struct PreTokenizer {
  PreKind kind;
  std::optional<Regex> regex;  // Split (Regex) / ByteLevel(use_regex)
  std::string literal;         // Split (String)
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

enum class DecKind { ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace };
struct Decoder {
  DecKind kind;
  std::string content, pattern;  // Strip content / Replace pattern+content / Metaspace replacement
  int start = 0, stop = 0;
  bool prefix = false;  // Metaspace: strip the leading space of the first token
};

struct Piece {
  uint32_t b, e;
  bool opaque = false;  // an ill-formed UTF-8 run: kept whole, never split or dropped
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Byte trie over added-token contents: leftmost-longest matching.
class Trie {
 public:
  void add(std::string_view s, int32_t idx) {
    int node = 0;
    for (unsigned char c : s) {
      int next = child(node, c);
      if (next < 0) {
        next = int(nodes_.size());
        nodes_.push_back({});
        nodes_[node].kids.push_back({c, next});
      }
      node = next;
    }
    nodes_[node].value = idx;
    if (!s.empty()) first_[static_cast<unsigned char>(s[0])] = true;
  }
  bool may_start(unsigned char c) const { return first_[c]; }
  // Longest match starting at text[i] accepted by `ok`; returns {len, idx} or {0,-1}.
  template <typename Ok>
  std::pair<size_t, int32_t> longest(std::string_view text, size_t i, Ok&& ok) const {
    int node = 0;
    std::pair<size_t, int32_t> best{0, -1};
    for (size_t k = i; k < text.size(); ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      int32_t v = nodes_[node].value;
      if (v >= 0 && ok(v)) best = {k + 1 - i, v};
    }
    return best;
  }
  bool empty() const { return nodes_.size() == 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> kids;
    int32_t value = -1;
  };
  int child(int node, unsigned char c) const {
    for (auto& [k, n] : nodes_[node].kids)
      if (k == c) return n;
    return -1;
  }
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_{};
};

bool is_word_char(std::string_view s, size_t pos_before_or_at, bool before) {
  // Checks the code point just before `pos` (before=true) or at `pos`.
  if (before) {
    if (pos_before_or_at == 0) return false;
    size_t p = pos_before_or_at - 1;
    while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    char32_t cp;
    utf8_next(s, p, cp);
    return cp != kInvalidCp && (cp == '_' || (cp < 0x80 ? std::isalnum(int(cp)) != 0 : !is_white_space(cp)));
  }
  if (pos_before_or_at >= s.size()) return false;
  char32_t cp;
  utf8_next(s, pos_before_or_at, cp);
  return cp != kInvalidCp && (cp == '_' || (cp < 0x80 ? std::isalnum(int(cp)) != 0 : !is_white_space(cp)));
}

}  // namespace

char32_t byte_level_char(uint8_t b) { return byte_level().to_char[b]; }

// ---------------------------------------------------------------- implementation

struct Tokenizer::Impl {
  std::string source;
  // model
  StrMap vocab;                          // model-space string -> id (raw bytes when byte-level)
  std::vector<std::string> id_to_tok;    // id -> token string as written in tokenizer.json
  std::vector<uint8_t> id_special;       // 1 if special added token
  PairMap merges;
  bool byte_level = false;  // a ByteLevel pre-tokenizer maps bytes to the GPT-2 alphabet
  std::array<int32_t, 256> byte_ids{};   // byte-level: initial symbol per byte (-1 if absent)
  std::array<int32_t, 256> fallback_ids{};  // <0xXX> tokens (-1 if absent)
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  std::optional<int32_t> unk;
  // pipeline
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pretoks;
  std::vector<Decoder> decoders;
  // added tokens
  std::vector<AddedToken> added;
  std::vector<AddedTokenInfo> added_info;
  Trie raw_trie, norm_trie;
  bool any_normalized_added = false;
  // post-processing
  std::vector<int32_t> prefix_ids, suffix_ids;
  // config
  std::optional<int32_t> bos, eos, pad, unk_cfg;
  bool clean_up = false;
  std::optional<std::string> chat_template;
  // decode
  std::vector<std::string> pieces;  // per-id streaming bytes (not first)
  bool pure_byte_level_decoder = false;

  // ------------------------------------------------ loading
  void load(const json& tj, const json& cfg);
  void load_model(const json& m);
  void load_normalizer(const json& n, const std::string& path);
  void load_pretokenizer(const json& p, const std::string& path);
  void load_decoder(const json& d, const std::string& path);
  void load_post(const json& p, const std::string& path);
  int32_t id_for(const std::string& tok, const std::string& path) const {
    auto it = vocab_any(tok);
    if (!it) fail("{}: token {} is not in the vocabulary", path, json(tok).dump());
    return *it;
  }
  std::optional<int32_t> vocab_any(std::string_view tok) const {
    for (const auto& a : added)
      if (a.content == tok) return a.id;
    if (byte_level) {
      if (auto raw = byte_level_decode(tok)) {
        auto it = vocab.find(*raw);
        if (it != vocab.end()) return it->second;
      }
    }
    auto it = vocab.find(tok);
    if (it != vocab.end()) return it->second;
    return std::nullopt;
  }

  // ------------------------------------------------ encoding
  struct Scratch {
    std::vector<std::unique_ptr<Regex::Scratch>> re;  // one per pre-tokenizer (lazily)
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;  // word -> span in cache_ids
    std::vector<int32_t> cache_ids;
    std::vector<int32_t> sym, nxt, prv;
    std::vector<int32_t> ranks;
  };
  void encode_section(std::string_view text, Scratch& s, std::vector<int32_t>& out) const;
  std::string normalize(std::string_view text) const;
  void pre_tokenize(std::string& buf, std::vector<Piece>& pieces, Scratch& s) const;
  void bpe_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& sym) const;
  void merge_small(std::vector<int32_t>& sym, Scratch& s) const;
  void merge_large(std::vector<int32_t>& sym, Scratch& s) const;
  void split_added(std::string_view text, const Trie& trie, bool parse_special,
                   std::vector<std::pair<std::string_view, int32_t>>& out) const;

  // ------------------------------------------------ decoding
  std::vector<std::string> run_decoders(std::vector<std::string> toks) const;
};

void Tokenizer::Impl::load(const json& tj, const json& cfg) {
  if (!tj.is_object()) fail("{}: top level must be a JSON object", source);
  if (!tj.contains("model") || tj["model"].is_null()) fail("{}: field \"model\" is missing", source);

  // Pre-tokenizer first: it decides whether the vocabulary is in the byte-level alphabet.
  if (tj.contains("pre_tokenizer") && !tj["pre_tokenizer"].is_null())
    load_pretokenizer(tj["pre_tokenizer"], source + ": pre_tokenizer");
  for (const auto& p : pretoks) byte_level |= p.kind == PreKind::ByteLevel;
  if (tj.contains("normalizer") && !tj["normalizer"].is_null())
    load_normalizer(tj["normalizer"], source + ": normalizer");

  // Added tokens before the model so merges/vocab errors can mention them.
  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) {
    const json& at = tj["added_tokens"];
    if (!at.is_array()) fail("{}: added_tokens: expected an array", source);
    for (size_t i = 0; i < at.size(); ++i) {
      std::string path = fmt::format("{}: added_tokens[{}]", source, i);
      const json& t = at[i];
      const json& idj = need(t, "id", path);
      if (!idj.is_number_integer() || idj.get<int64_t>() < 0 || idj.get<int64_t>() > kMaxTokenId)
        fail("{}.id: expected an integer in [0, {}]", path, kMaxTokenId);
      AddedToken a;
      a.id = idj.get<int32_t>();
      a.content = need_str(t, "content", path);
      if (a.content.empty()) fail("{}.content: empty", path);
      a.special = opt_bool(t, "special", false, path);
      a.lstrip = opt_bool(t, "lstrip", false, path);
      a.rstrip = opt_bool(t, "rstrip", false, path);
      a.single_word = opt_bool(t, "single_word", false, path);
      a.normalized = opt_bool(t, "normalized", !a.special, path);
      added.push_back(a);
    }
  }
  load_model(need(tj, "model", source));

  // Id table covering vocab and added tokens.
  int32_t max_id = -1;
  for (const auto& t : id_to_tok) (void)t;
  max_id = int32_t(id_to_tok.size()) - 1;
  for (const auto& a : added) max_id = std::max(max_id, a.id);
  id_to_tok.resize(size_t(max_id + 1));
  id_special.assign(size_t(max_id + 1), 0);
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& a = added[i];
    id_to_tok[a.id] = a.content;
    id_special[a.id] = a.special;
    added_info.push_back({a.id, a.content, a.special});
    if (a.normalized && !normalizers.empty()) {
      norm_trie.add(a.content, int32_t(i));
      any_normalized_added = true;
    } else {
      raw_trie.add(a.content, int32_t(i));
    }
  }

  if (tj.contains("decoder") && !tj["decoder"].is_null())
    load_decoder(tj["decoder"], source + ": decoder");
  if (tj.contains("post_processor") && !tj["post_processor"].is_null())
    load_post(tj["post_processor"], source + ": post_processor");

  // tokenizer_config.json
  auto cfg_id = [&](const char* key) -> std::optional<int32_t> {
    auto tok = config_token(cfg, key);
    if (!tok) return std::nullopt;
    auto id = vocab_any(*tok);
    if (!id) fail("tokenizer_config.json: {} {} is not in the vocabulary", key, json(*tok).dump());
    return id;
  };
  bos = cfg_id("bos_token");
  eos = cfg_id("eos_token");
  pad = cfg_id("pad_token");
  unk_cfg = cfg_id("unk_token");
  if (!unk_cfg) unk_cfg = unk;
  clean_up = opt_bool(cfg, "clean_up_tokenization_spaces", false, "tokenizer_config.json");
  if (cfg.is_object() && cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const auto& e : ct)
        if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
            e["template"].is_string())
          chat_template = e["template"].get<std::string>();
    }
  }
  // BOS/EOS policy: explicit add_bos_token / add_eos_token in the config win over the
  // post-processor (what transformers does for Llama-style tokenizers).
  bool has_add_bos = cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean();
  bool has_add_eos = cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean();
  if (has_add_bos) {
    prefix_ids.clear();
    if (cfg["add_bos_token"].get<bool>() && bos) prefix_ids.push_back(*bos);
  }
  if (has_add_eos) {
    suffix_ids.clear();
    if (cfg["add_eos_token"].get<bool>() && eos) suffix_ids.push_back(*eos);
  }

  // Streaming pieces.
  pieces.resize(id_to_tok.size());
  pure_byte_level_decoder = decoders.size() == 1 && decoders[0].kind == DecKind::ByteLevel;
  for (size_t id = 0; id < id_to_tok.size(); ++id) {
    if (id_special[id] || pure_byte_level_decoder) {
      if (id_special[id]) { pieces[id] = id_to_tok[id]; continue; }
      auto raw = byte_level_decode(id_to_tok[id]);
      pieces[id] = raw ? *raw : id_to_tok[id];
      continue;
    }
    std::vector<std::string> one{id_to_tok[id]};
    // Decoders that join or strip at sequence edges are skipped per token; ByteFallback
    // yields the raw byte so the streaming UTF-8 assembler can combine it.
    for (const auto& d : decoders) {
      if (d.kind == DecKind::ByteFallback) {
        if (const auto b = byte_fallback_byte(one[0])) one[0] = std::string(1, *b);
      } else if (d.kind == DecKind::ByteLevel) {
        if (auto raw = byte_level_decode(one[0])) one[0] = *raw;
      } else if (d.kind == DecKind::Replace) {
        std::string r;
        size_t pos = 0;
        const std::string& t = one[0];
        while (true) {
          size_t f = d.pattern.empty() ? std::string::npos : t.find(d.pattern, pos);
          if (f == std::string::npos) { r.append(t, pos); break; }
          r.append(t, pos, f - pos).append(d.content);
          pos = f + d.pattern.size();
        }
        one[0] = r;
      } else if (d.kind == DecKind::Metaspace) {
        std::string r;
        const std::string& t = one[0];
        for (size_t pos = 0;;) {
          size_t f = t.find(d.content, pos);
          if (f == std::string::npos) { r.append(t, pos); break; }
          r.append(t, pos, f - pos).push_back(' ');
          pos = f + d.content.size();
        }
        one[0] = r;
      }
    }
    pieces[id] = one[0];
  }
}

void Tokenizer::Impl::load_model(const json& m) {
  std::string path = source + ": model";
  std::string type = m.is_object() && m.contains("type") ? m["type"].get<std::string>() : "BPE";
  if (type != "BPE") fail("{}.type: unsupported model type {} (only BPE)", path, json(type).dump());
  if (!m.contains("dropout") || m["dropout"].is_null() ||
      (m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
  } else {
    fail("{}.dropout: BPE dropout is not supported at inference", path);
  }
  if (!opt_str(m, "continuing_subword_prefix", path).empty())
    fail("{}.continuing_subword_prefix: not supported", path);
  if (!opt_str(m, "end_of_word_suffix", path).empty())
    fail("{}.end_of_word_suffix: not supported", path);
  byte_fallback = opt_bool(m, "byte_fallback", false, path);
  ignore_merges = opt_bool(m, "ignore_merges", false, path);
  fuse_unk = opt_bool(m, "fuse_unk", false, path);

  const json& v = need(m, "vocab", path);
  if (!v.is_object()) fail("{}.vocab: expected an object of token -> id", path);
  int32_t max_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxTokenId)
      fail("{}.vocab[{}]: id must be an integer in [0, {}]", path, json(it.key()).dump(),
           kMaxTokenId);
    else
      max_id = std::max(max_id, it->get<int32_t>());
  id_to_tok.assign(size_t(max_id + 1), {});
  vocab.reserve(v.size() * 2);
  for (auto it = v.begin(); it != v.end(); ++it) {
    int32_t id = it->get<int32_t>();
    id_to_tok[id] = it.key();
    if (byte_level) {
      if (auto raw = byte_level_decode(it.key())) vocab.emplace(std::move(*raw), id);
      // Tokens outside the byte alphabet can only come from added tokens: not BPE-reachable.
    } else {
      vocab.emplace(it.key(), id);
    }
  }
  byte_ids.fill(-1);
  fallback_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (byte_level) {
      auto it = vocab.find(std::string(1, char(b)));
      if (it != vocab.end()) byte_ids[b] = it->second;
    }
    auto it = v.find(fmt::format("<0x{:02X}>", b));
    if (it != v.end()) fallback_ids[b] = it->get<int32_t>();
  }
  if (byte_fallback)
    for (int b = 0; b < 256; ++b)
      if (fallback_ids[b] < 0)
        fail("{}.byte_fallback: vocabulary lacks byte token <0x{:02X}>", path, b);

  std::string unk_tok = opt_str(m, "unk_token", path);
  if (!unk_tok.empty()) {
    auto it = v.find(unk_tok);
    if (it == v.end()) fail("{}.unk_token: {} is not in the vocabulary", path, json(unk_tok).dump());
    unk = it->get<int32_t>();
  }

  const json& mg = need(m, "merges", path);
  if (!mg.is_array()) fail("{}.merges: expected an array", path);
  merges.reserve(mg.size());
  // Hash index over the tokens as written (json's std::map lookups dominate load time).
  std::unordered_map<std::string_view, int32_t> by_name;
  by_name.reserve(v.size() * 2);
  for (auto it = v.begin(); it != v.end(); ++it) by_name.emplace(it.key(), it->get<int32_t>());
  auto lookup = [&](const std::string& tok, size_t i) -> int32_t {
    auto it = by_name.find(tok);
    if (it == by_name.end())
      fail("{}.merges[{}]: token {} is not in the vocabulary", path, i, json(tok).dump());
    return it->second;
  };
  for (size_t i = 0; i < mg.size(); ++i) {
    std::string a, b;
    const json& e = mg[i];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("{}.merges[{}]: expected \"left right\", got {}", path, i, e.dump());
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail("{}.merges[{}]: expected a string or a pair of strings, got {}", path, i, e.dump());
    }
    int32_t ia = lookup(a, i), ib = lookup(b, i), im = lookup(a + b, i);
    // First occurrence wins (lowest rank), as in the reference implementation.
    merges.insert(PairMap::make_key(ia, ib), int32_t(i), im);
  }
}

void Tokenizer::Impl::load_normalizer(const json& n, const std::string& path) {
  std::string t = type_of(n, path);
  if (t == "Sequence") {
    const json& arr = need(n, "normalizers", path);
    if (!arr.is_array()) fail("{}.normalizers: expected an array", path);
    for (size_t i = 0; i < arr.size(); ++i)
      load_normalizer(arr[i], fmt::format("{}.normalizers[{}]", path, i));
  } else if (t == "NFC") {
    normalizers.push_back({NormKind::NFC, {}, {}, {}});
  } else if (t == "NFD") {
    normalizers.push_back({NormKind::NFD, {}, {}, {}});
  } else if (t == "Replace") {
    Normalizer r{NormKind::Replace, {}, {}, {}};
    const json& p = need(n, "pattern", path);
    r.content = need_str(n, "content", path);
    if (p.contains("String")) r.pattern = p["String"].get<std::string>();
    else if (p.contains("Regex")) r.regex.emplace(p["Regex"].get<std::string>(), path + ".pattern");
    else fail("{}.pattern: expected String or Regex", path);
    normalizers.push_back(std::move(r));
  } else if (t == "Prepend") {
    Normalizer r{NormKind::Prepend, {}, {}, {}};
    r.content = need_str(n, "prepend", path);
    normalizers.push_back(std::move(r));
  } else if (t == "Strip") {
    Normalizer r{NormKind::Strip, {}, {}, {}};
    r.left = opt_bool(n, "strip_left", false, path);
    r.right = opt_bool(n, "strip_right", false, path);
    normalizers.push_back(std::move(r));
  } else {
    fail("{}.type: unsupported normalizer {}", path, json(t).dump());
  }
}

void Tokenizer::Impl::load_pretokenizer(const json& p, const std::string& path) {
  std::string t = type_of(p, path);
  if (t == "Sequence") {
    const json& arr = need(p, "pretokenizers", path);
    if (!arr.is_array()) fail("{}.pretokenizers: expected an array", path);
    for (size_t i = 0; i < arr.size(); ++i)
      load_pretokenizer(arr[i], fmt::format("{}.pretokenizers[{}]", path, i));
  } else if (t == "Split") {
    PreTokenizer s{PreKind::Split, {}, {}, Behavior::Isolated, false, false};
    const json& pat = need(p, "pattern", path);
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
      s.regex.emplace(pat["Regex"].get<std::string>(), path + ".pattern.Regex");
    else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
      s.literal = pat["String"].get<std::string>();
    else
      fail("{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", path);
    std::string b = need_str(p, "behavior", path);
    if (b == "Removed") s.behavior = Behavior::Removed;
    else if (b == "Isolated") s.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious") s.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous") s.behavior = Behavior::Contiguous;
    else fail("{}.behavior: unknown behavior {}", path, json(b).dump());
    s.invert = opt_bool(p, "invert", false, path);
    pretoks.push_back(std::move(s));
  } else if (t == "ByteLevel") {
    PreTokenizer s{PreKind::ByteLevel, {}, {}, Behavior::Isolated, false, false};
    s.add_prefix_space = opt_bool(p, "add_prefix_space", true, path);
    if (opt_bool(p, "use_regex", true, path))
      s.regex.emplace(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                      path + " (GPT-2 regex)");
    pretoks.push_back(std::move(s));
  } else if (t == "Digits") {
    PreTokenizer s{PreKind::Split, {}, {}, Behavior::Isolated, false, false};
    bool individual = opt_bool(p, "individual_digits", false, path);
    s.regex.emplace(individual ? "\\p{N}" : "\\p{N}+", path);
    pretoks.push_back(std::move(s));
  } else {
    fail("{}.type: unsupported pre-tokenizer {}", path, json(t).dump());
  }
}

void Tokenizer::Impl::load_decoder(const json& d, const std::string& path) {
  std::string t = type_of(d, path);
  if (t == "Sequence") {
    const json& arr = need(d, "decoders", path);
    if (!arr.is_array()) fail("{}.decoders: expected an array", path);
    for (size_t i = 0; i < arr.size(); ++i)
      load_decoder(arr[i], fmt::format("{}.decoders[{}]", path, i));
  } else if (t == "ByteLevel") {
    decoders.push_back({DecKind::ByteLevel, {}, {}, 0, 0, false});
  } else if (t == "ByteFallback") {
    decoders.push_back({DecKind::ByteFallback, {}, {}, 0, 0, false});
  } else if (t == "Fuse") {
    decoders.push_back({DecKind::Fuse, {}, {}, 0, 0, false});
  } else if (t == "Strip") {
    Decoder s{DecKind::Strip, need_str(d, "content", path), {}, 0, 0, false};
    s.start = d.value("start", 0);
    s.stop = d.value("stop", 0);
    decoders.push_back(std::move(s));
  } else if (t == "Replace") {
    const json& p = need(d, "pattern", path);
    if (!p.contains("String") || !p["String"].is_string())
      fail("{}.pattern: only String patterns are supported in decoders", path);
    decoders.push_back({DecKind::Replace, need_str(d, "content", path), p["String"].get<std::string>(), 0, 0, false});
  } else if (t == "Metaspace") {
    Decoder s{DecKind::Metaspace, need_str(d, "replacement", path), {}, 0, 0, true};
    std::string scheme = opt_str(d, "prepend_scheme", path);
    s.prefix = scheme.empty() ? opt_bool(d, "add_prefix_space", true, path) : scheme != "never";
    decoders.push_back(std::move(s));
  } else {
    fail("{}.type: unsupported decoder {}", path, json(t).dump());
  }
}

void Tokenizer::Impl::load_post(const json& p, const std::string& path) {
  // Ids the post-processor adds must be tokens of the finished id table (vocab + added tokens).
  const auto known_id = [&](const json& x, const std::string& where) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
        x.get<int64_t>() >= int64_t(id_to_tok.size()))
      fail("{}: id {} is not a token id (vocabulary of {})", where, x.dump(), id_to_tok.size());
    return int32_t(x.get<int64_t>());
  };
  std::string t = type_of(p, path);
  if (t == "ByteLevel") return;  // only adjusts offsets
  if (t == "Sequence") {
    const json& arr = need(p, "processors", path);
    for (size_t i = 0; i < arr.size(); ++i) load_post(arr[i], fmt::format("{}.processors[{}]", path, i));
    return;
  }
  if (t == "TemplateProcessing") {
    const json& single = need(p, "single", path);
    const json& st = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    if (!single.is_array()) fail("{}.single: expected an array", path);
    bool seen_seq = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      std::string ipath = fmt::format("{}.single[{}]", path, i);
      if (item.contains("Sequence")) { seen_seq = true; continue; }
      if (!item.contains("SpecialToken")) fail("{}: expected Sequence or SpecialToken", ipath);
      std::string name = need_str(item["SpecialToken"], "id", ipath + ".SpecialToken");
      std::vector<int32_t> ids;
      if (st.contains(name) && st[name].contains("ids")) {
        for (const auto& x : st[name]["ids"])
          ids.push_back(known_id(x, fmt::format("{}.special_tokens.{}", path, name)));
      } else {
        ids.push_back(id_for(name, ipath));
      }
      auto& dst = seen_seq ? suffix_ids : prefix_ids;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    return;
  }
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    auto tok = [&](const char* k) {
      const json& a = need(p, k, path);
      if (!a.is_array() || a.size() != 2) fail("{}.{}: expected [token, id]", path, k);
      return known_id(a[1], fmt::format("{}.{}", path, k));
    };
    prefix_ids = {tok("cls")};
    suffix_ids = {tok("sep")};
    return;
  }
  fail("{}.type: unsupported post-processor {}", path, json(t).dump());
}

// ------------------------------------------------------------------ encode

std::string Tokenizer::Impl::normalize(std::string_view text) const {
  std::string s(text);
  for (const auto& n : normalizers) {
    switch (n.kind) {
      case NormKind::NFC: s = nfc(s); break;
      case NormKind::NFD: s = nfd(s); break;
      case NormKind::Prepend: if (!s.empty()) s = n.content + s; break;
      case NormKind::Strip: {
        size_t b = 0, e = s.size();
        auto ws_at = [&](size_t i, size_t& len) {
          char32_t cp;
          len = utf8_next(s, i, cp);
          return cp != kInvalidCp && is_white_space(cp);
        };
        size_t len;
        if (n.left) while (b < e && ws_at(b, len)) b += len;
        if (n.right) {
          while (e > b) {
            size_t p = e - 1;
            while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
            if (!ws_at(p, len) || p + len != e) break;
            e = p;
          }
        }
        s = s.substr(b, e - b);
        break;
      }
      case NormKind::Replace: {
        std::string r;
        if (n.regex) {
          Regex::Scratch sc(*n.regex);
          size_t pos = 0, mb, me;
          while (pos <= s.size() && n.regex->find(s, pos, sc, mb, me)) {
            r.append(s, pos, mb - pos).append(n.content);
            if (me == mb) {
              if (mb >= s.size()) { pos = s.size() + 1; break; }
              char32_t cp;
              size_t l = utf8_next(s, mb, cp);
              r.append(s, mb, l);
              pos = mb + l;
            } else {
              pos = me;
            }
          }
          if (pos <= s.size()) r.append(s, pos);
        } else if (n.pattern.empty()) {
          r = s;
        } else {
          size_t pos = 0;
          while (true) {
            size_t f = s.find(n.pattern, pos);
            if (f == std::string::npos) { r.append(s, pos); break; }
            r.append(s, pos, f - pos).append(n.content);
            pos = f + n.pattern.size();
          }
        }
        s = std::move(r);
        break;
      }
    }
  }
  return s;
}

namespace {
// Splits [b, e) of buf into (segment, is_delimiter) by behaviour, appending kept pieces.
void apply_behavior(std::vector<std::tuple<uint32_t, uint32_t, bool>>& segs, Behavior beh,
                    std::vector<Piece>& out) {
  switch (beh) {
    case Behavior::Removed:
      for (auto& [b, e, m] : segs)
        if (!m && e > b) out.push_back({b, e});
      return;
    case Behavior::Isolated:
      for (auto& [b, e, m] : segs)
        if (e > b) out.push_back({b, e});
      return;
    case Behavior::MergedWithPrevious: {
      std::vector<Piece> acc;
      bool prev_match = false;
      for (auto& [b, e, m] : segs) {
        if (m && !prev_match && !acc.empty()) acc.back().e = e;
        else acc.push_back({b, e});
        prev_match = m;
      }
      for (auto& p : acc)
        if (p.e > p.b) out.push_back(p);
      return;
    }
    case Behavior::MergedWithNext: {
      std::vector<Piece> acc;
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        auto& [b, e, m] = segs[k];
        if (m && !prev_match && !acc.empty()) acc.back().b = b;
        else acc.push_back({b, e});
        prev_match = m;
      }
      for (size_t k = acc.size(); k-- > 0;)
        if (acc[k].e > acc[k].b) out.push_back(acc[k]);
      return;
    }
    case Behavior::Contiguous: {
      std::vector<Piece> acc;
      bool prev_match = false;
      for (auto& [b, e, m] : segs) {
        if (m == prev_match && !acc.empty()) acc.back().e = e;
        else acc.push_back({b, e});
        prev_match = m;
      }
      for (auto& p : acc)
        if (p.e > p.b) out.push_back(p);
      return;
    }
  }
}
}  // namespace

void Tokenizer::Impl::pre_tokenize(std::string& buf, std::vector<Piece>& pieces, Scratch& s) const {
  pieces.clear();
  if (utf8_valid(buf)) {
    pieces.push_back({0, uint32_t(buf.size())});
  } else {
    // Ill-formed byte runs become their own pieces so that no Split behaviour can drop
    // them: byte-level models then encode any byte string losslessly.
    size_t seg = 0;
    for (size_t i = 0; i < buf.size();) {
      char32_t cp;
      size_t n = utf8_next(buf, i, cp);
      if (cp == kInvalidCp) {
        if (i > seg) pieces.push_back({uint32_t(seg), uint32_t(i)});
        if (!pieces.empty() && pieces.back().opaque && pieces.back().e == i) pieces.back().e = uint32_t(i + n);
        else pieces.push_back({uint32_t(i), uint32_t(i + n), true});
        seg = i + n;
      }
      i += n;
    }
    if (seg < buf.size()) pieces.push_back({uint32_t(seg), uint32_t(buf.size())});
  }
  std::vector<Piece> next;
  std::vector<std::tuple<uint32_t, uint32_t, bool>> segs;
  for (size_t k = 0; k < pretoks.size(); ++k) {
    const PreTokenizer& pt = pretoks[k];
    if (pt.kind == PreKind::ByteLevel && pt.add_prefix_space) {
      // Rebuild the buffer with a space in front of every piece that lacks one.
      std::string nb;
      nb.reserve(buf.size() + pieces.size());
      next.clear();
      for (const auto& p : pieces) {
        uint32_t b = uint32_t(nb.size());
        if (buf[p.b] != ' ' && !p.opaque) nb.push_back(' ');
        nb.append(buf, p.b, p.e - p.b);
        next.push_back({b, uint32_t(nb.size()), p.opaque});
      }
      buf.swap(nb);
      pieces.swap(next);
    }
    if (!pt.regex && pt.literal.empty()) continue;  // ByteLevel without regex: mapping only
    next.clear();
    if (s.re.size() <= k) s.re.resize(k + 1);
    if (pt.regex && !s.re[k]) s.re[k] = std::make_unique<Regex::Scratch>(*pt.regex);
    for (const auto& p : pieces) {
      if (p.opaque) { next.push_back(p); continue; }
      std::string_view sub(buf.data() + p.b, p.e - p.b);
      segs.clear();
      size_t pos = 0, prev = 0;
      while (pos <= sub.size()) {
        size_t mb, me;
        if (pt.regex) {
          if (!pt.regex->find(sub, pos, *s.re[k], mb, me)) break;
        } else {
          size_t f = sub.find(pt.literal, pos);
          if (f == std::string_view::npos) break;
          mb = f;
          me = f + pt.literal.size();
        }
        if (mb > prev) segs.emplace_back(p.b + prev, p.b + mb, false);
        segs.emplace_back(p.b + mb, p.b + me, true);
        prev = me;
        if (me == mb) {  // empty match: step one code point
          if (mb >= sub.size()) break;
          char32_t cp;
          pos = mb + utf8_next(sub, mb, cp);
        } else {
          pos = me;
        }
      }
      if (prev < sub.size()) segs.emplace_back(p.b + prev, p.e, false);
      // ByteLevel's regex isolates every match; Split may invert the role of matches.
      Behavior beh = pt.kind == PreKind::ByteLevel ? Behavior::Isolated : pt.behavior;
      if (pt.invert)
        for (auto& sg : segs) std::get<2>(sg) = !std::get<2>(sg);
      apply_behavior(segs, beh, next);
    }
    pieces.swap(next);
  }
}

void Tokenizer::Impl::initial_symbols(std::string_view word, std::vector<int32_t>& sym) const {
  sym.clear();
  if (byte_level) {
    for (unsigned char c : word) {
      int32_t id = byte_ids[c];
      if (id >= 0) sym.push_back(id);
      else if (byte_fallback && fallback_ids[c] >= 0) sym.push_back(fallback_ids[c]);
      else if (unk && !(fuse_unk && !sym.empty() && sym.back() == *unk)) sym.push_back(*unk);
    }
    return;
  }
  for (size_t i = 0; i < word.size();) {
    char32_t cp;
    size_t n = utf8_next(word, i, cp);
    auto it = vocab.find(word.substr(i, n));
    if (it != vocab.end()) {
      sym.push_back(it->second);
    } else if (byte_fallback) {
      for (size_t k = 0; k < n; ++k) sym.push_back(fallback_ids[static_cast<unsigned char>(word[i + k])]);
    } else if (unk && !(fuse_unk && !sym.empty() && sym.back() == *unk)) {
      sym.push_back(*unk);
    }
    i += n;
  }
}

// Quadratic-but-tiny merge loop for short words: cached pair ranks, leftmost lowest rank.
void Tokenizer::Impl::merge_small(std::vector<int32_t>& sym, Scratch& s) const {
  auto& ranks = s.ranks;
  auto& ids = s.nxt;  // merged id per pair
  size_t n = sym.size();
  ranks.resize(n);
  ids.resize(n);
  auto fill = [&](size_t i) {
    auto [r, id] = merges.find(PairMap::make_key(sym[i], sym[i + 1]));
    ranks[i] = r < 0 ? INT32_MAX : r;
    ids[i] = id;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    int32_t br = INT32_MAX;
    for (size_t i = 0; i + 1 < n; ++i)
      if (ranks[i] < br) { br = ranks[i]; best = i; }
    if (br == INT32_MAX) break;
    sym[best] = ids[best];
    sym.erase(sym.begin() + best + 1);
    ranks.erase(ranks.begin() + best + 1);
    ids.erase(ids.begin() + best + 1);
    --n;
    if (best + 1 < n) fill(best);
    else { ranks[best] = INT32_MAX; }
    if (best > 0) fill(best - 1);
  }
  sym.resize(n);
}

// Heap-based merges for long words (long whitespace or symbol runs): O(n log n).
void Tokenizer::Impl::merge_large(std::vector<int32_t>& sym, Scratch& s) const {
  size_t n = sym.size();
  auto& nxt = s.nxt;
  auto& prv = s.prv;
  nxt.resize(n);
  prv.resize(n);
  for (size_t i = 0; i < n; ++i) {
    nxt[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prv[i] = int32_t(i) - 1;
  }
  struct Cand {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || nxt[i] < 0) return;
    auto [r, id] = merges.find(PairMap::make_key(sym[i], sym[nxt[i]]));
    if (r >= 0) heap.push({r, i, sym[i], sym[nxt[i]], id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    int32_t i = c.pos;
    if (dead[i] || nxt[i] < 0 || sym[i] != c.left || sym[nxt[i]] != c.right) continue;
    int32_t j = nxt[i];
    sym[i] = c.merged;
    dead[j] = 1;
    nxt[i] = nxt[j];
    if (nxt[j] >= 0) prv[nxt[j]] = i;
    push(prv[i]);
    push(i);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && size_t(i) < n; i = nxt[i]) sym[out++] = sym[i];
  sym.resize(out);
}

void Tokenizer::Impl::bpe_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) { out.push_back(it->second); return; }
  }
  bool cacheable = word.size() <= 64;
  if (cacheable) {
    auto it = s.cache.find(word);
    if (it != s.cache.end()) {
      out.insert(out.end(), s.cache_ids.begin() + it->second.first,
                 s.cache_ids.begin() + it->second.first + it->second.second);
      return;
    }
  }
  auto& sym = s.sym;
  initial_symbols(word, sym);
  if (sym.size() <= 48) merge_small(sym, s);
  else merge_large(sym, s);
  if (cacheable && s.cache.size() < 200000) {
    s.cache.emplace(std::string(word), std::pair<uint32_t, uint32_t>{uint32_t(s.cache_ids.size()), uint32_t(sym.size())});
    s.cache_ids.insert(s.cache_ids.end(), sym.begin(), sym.end());
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void Tokenizer::Impl::split_added(std::string_view text, const Trie& trie, bool parse_special,
                                  std::vector<std::pair<std::string_view, int32_t>>& out) const {
  if (trie.empty()) { out.emplace_back(text, -1); return; }
  auto ok_at = [&](size_t start, size_t len, int32_t idx) {
    const AddedToken& a = added[idx];
    if (a.special && !parse_special) return false;
    if (a.single_word && (is_word_char(text, start, true) || is_word_char(text, start + len, false)))
      return false;
    return true;
  };
  size_t seg = 0, i = 0;
  while (i < text.size()) {
    if (!trie.may_start(static_cast<unsigned char>(text[i]))) { ++i; continue; }
    size_t start = i;
    auto [len, idx] = trie.longest(text, i, [&](int32_t v) { (void)v; return true; });
    // Re-run with the acceptance rule (single_word / special) only when something matched.
    if (idx >= 0 && !ok_at(start, len, idx)) {
      std::pair<size_t, int32_t> best{0, -1};
      for (size_t l = len; l > 0 && best.second < 0; --l) {
        auto r = trie.longest(text.substr(0, start + l), start, [&](int32_t v) { return ok_at(start, l, v); });
        if (r.second >= 0 && r.first == l) best = r;
      }
      len = best.first;
      idx = best.second;
    }
    if (idx < 0) { ++i; continue; }
    const AddedToken& a = added[idx];
    size_t mb = start, me = start + len;
    if (a.lstrip)
      while (mb > seg && (text[mb - 1] == ' ' || text[mb - 1] == '\t' || text[mb - 1] == '\n' || text[mb - 1] == '\r')) --mb;
    if (a.rstrip)
      while (me < text.size() && (text[me] == ' ' || text[me] == '\t' || text[me] == '\n' || text[me] == '\r')) ++me;
    if (mb > seg) out.emplace_back(text.substr(seg, mb - seg), -1);
    out.emplace_back(std::string_view{}, a.id);
    seg = i = me;
  }
  if (seg < text.size()) out.emplace_back(text.substr(seg), -1);
}

void Tokenizer::Impl::encode_section(std::string_view text, Scratch& s, std::vector<int32_t>& out) const {
  std::string buf = normalizers.empty() ? std::string(text) : normalize(text);
  std::vector<Piece> pcs;
  pre_tokenize(buf, pcs, s);
  for (const auto& p : pcs) bpe_word(std::string_view(buf.data() + p.b, p.e - p.b), s, out);
}

// ------------------------------------------------------------------ decode

std::vector<std::string> Tokenizer::Impl::run_decoders(std::vector<std::string> toks) const {
  for (const auto& d : decoders) {
    switch (d.kind) {
      case DecKind::ByteLevel: {
        std::string all;
        for (const auto& t : toks) {
          if (auto raw = byte_level_decode(t)) all += *raw;
          else all += t;
        }
        toks.assign(1, utf8_lossy(all));
        break;
      }
      case DecKind::ByteFallback: {
        std::vector<std::string> r;
        std::string bytes;
        size_t nbytes = 0;
        auto flush = [&] {
          if (!nbytes) return;
          if (utf8_valid(bytes)) r.push_back(bytes);
          else for (size_t k = 0; k < nbytes; ++k) r.push_back("\xEF\xBF\xBD");
          bytes.clear();
          nbytes = 0;
        };
        for (auto& t : toks) {
          if (const auto b = byte_fallback_byte(t)) {
            bytes.push_back(*b);
            ++nbytes;
          } else {
            flush();
            r.push_back(std::move(t));
          }
        }
        flush();
        toks = std::move(r);
        break;
      }
      case DecKind::Fuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case DecKind::Strip: {
        for (auto& t : toks) {
          // Strip operates on characters: `content` is one char.
          size_t b = 0, e = t.size();
          for (int k = 0; k < d.start && t.compare(b, d.content.size(), d.content) == 0 && b < e; ++k)
            b += d.content.size();
          for (int k = 0; k < d.stop && e >= b + d.content.size() &&
                          t.compare(e - d.content.size(), d.content.size(), d.content) == 0; ++k)
            e -= d.content.size();
          t = t.substr(b, e - b);
        }
        break;
      }
      case DecKind::Replace: {
        for (auto& t : toks) {
          std::string r;
          size_t pos = 0;
          while (true) {
            size_t f = d.pattern.empty() ? std::string::npos : t.find(d.pattern, pos);
            if (f == std::string::npos) { r.append(t, pos); break; }
            r.append(t, pos, f - pos).append(d.content);
            pos = f + d.pattern.size();
          }
          t = std::move(r);
        }
        break;
      }
      case DecKind::Metaspace: {
        for (size_t i = 0; i < toks.size(); ++i) {
          std::string r;
          const std::string& t = toks[i];
          for (size_t pos = 0;;) {
            size_t f = t.find(d.content, pos);
            if (f == std::string::npos) { r.append(t, pos); break; }
            r.append(t, pos, f - pos).push_back(' ');
            pos = f + d.content.size();
          }
          if (i == 0 && d.prefix && r.starts_with(' ')) r.erase(0, 1);
          toks[i] = std::move(r);
        }
        break;
      }
    }
  }
  return toks;
}

namespace {
std::string clean_up_spaces(std::string s) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    std::string r;
    size_t pos = 0;
    while (true) {
      size_t f = s.find(from, pos);
      if (f == std::string::npos) { r.append(s, pos); break; }
      r.append(s, pos, f - pos).append(to);
      pos = f + from.size();
    }
    s = std::move(r);
  }
  return s;
}
}  // namespace

// ------------------------------------------------------------------ public API

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& source) {
  json tj, cfg;
  try {
    tj = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", source, e.what());
  }
  if (!config_json.empty()) {
    try {
      cfg = json::parse(config_json);
    } catch (const json::exception& e) {
      fail("tokenizer_config.json: invalid JSON: {}", e.what());
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  try {
    impl->load(tj, cfg);
  } catch (const json::exception& e) {
    fail("{}: malformed field: {}", source, e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj)) fail("{}: not found", tj.string());
  std::string cfg;
  auto cj = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cj)) cfg = read_file(cj);
  return from_json(read_file(tj), cfg, tj.string());
}

void Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out,
                            const EncodeOptions& opts) const {
  const Impl& m = *impl_;
  if (opts.add_special_tokens) out.insert(out.end(), m.prefix_ids.begin(), m.prefix_ids.end());
  Impl::Scratch s;
  std::vector<std::pair<std::string_view, int32_t>> parts, sub;
  m.split_added(text, m.raw_trie, opts.parse_special, parts);
  for (auto& [seg, id] : parts) {
    if (id >= 0) { out.push_back(id); continue; }
    if (m.any_normalized_added) {
      // Normalised added tokens are matched on the normalised text.
      std::string norm = m.normalize(seg);
      sub.clear();
      m.split_added(norm, m.norm_trie, opts.parse_special, sub);
      for (auto& [sseg, sid] : sub) {
        if (sid >= 0) { out.push_back(sid); continue; }
        std::string buf(sseg);
        std::vector<Piece> pcs;
        m.pre_tokenize(buf, pcs, s);
        for (const auto& p : pcs) m.bpe_word(std::string_view(buf.data() + p.b, p.e - p.b), s, out);
      }
    } else {
      m.encode_section(seg, s, out);
    }
  }
  if (opts.add_special_tokens) out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, opts);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& opts) const {
  const Impl& m = *impl_;
  std::string text;
  if (m.pure_byte_level_decoder) {
    std::string raw;
    for (int32_t id : ids) {
      if (id < 0 || size_t(id) >= m.pieces.size()) continue;
      if (opts.skip_special_tokens && m.id_special[id]) continue;
      raw += m.pieces[id];
    }
    text = utf8_lossy(raw);
  } else {
    std::vector<std::string> toks;
    for (int32_t id : ids) {
      if (id < 0 || size_t(id) >= m.id_to_tok.size()) continue;
      if (opts.skip_special_tokens && m.id_special[id]) continue;
      toks.push_back(m.id_to_tok[id]);
    }
    for (auto& t : m.run_decoders(std::move(toks))) text += t;
    text = utf8_lossy(text);
  }
  if (opts.clean_up_tokenization_spaces.value_or(m.clean_up)) text = clean_up_spaces(std::move(text));
  return text;
}

std::string Tokenizer::token_bytes(int32_t id, bool first) const {
  const Impl& m = *impl_;
  if (id < 0 || size_t(id) >= m.pieces.size()) return {};
  std::string p = m.pieces[id];
  if (first && !m.id_special[id]) {
    for (const auto& d : m.decoders) {
      if (d.kind == DecKind::Metaspace && d.prefix && p.starts_with(' ')) p.erase(0, 1);
      if (d.kind == DecKind::Strip && d.start > 0 && d.content == " " && p.starts_with(' ')) p.erase(0, 1);
    }
  }
  return p;
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->id_to_tok.size()); }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->vocab_any(token); }
std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->id_to_tok.size()) return std::nullopt;
  return impl_->id_to_tok[id];
}
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->id_special.size() && impl_->id_special[id];
}
const std::vector<AddedTokenInfo>& Tokenizer::added_tokens() const { return impl_->added_info; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }
std::optional<int32_t> Tokenizer::unk_id() const { return impl_->unk_cfg; }
const std::optional<std::string>& Tokenizer::config_chat_template() const { return impl_->chat_template; }

}  // namespace nemo::text
