#include "fuzz_targets.h"

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace nemo::text::fuzz {
namespace {
const Tokenizer& tokenizer() {
  static const Tokenizer tok = [] {
    std::string corpus = "The quick brown fox jumps over the lazy dog. 東京 天气 😀 café 12345\n";
    for (int i = 0; i < 6; ++i) corpus += corpus;
    std::string tj = train_byte_level_bpe(corpus, 600, nemotron_special_tokens());
    return Tokenizer::from_json(tj, make_tokenizer_config(tj), "fuzz");
  }();
  return tok;
}
#define FUZZ_CHECK(c) \
  do {                \
    if (!(c)) std::abort(); \
  } while (0)
}  // namespace

void tokenizer_roundtrip(const uint8_t* data, size_t size) {
  const Tokenizer& tok = tokenizer();
  std::string s(reinterpret_cast<const char*>(data), size);
  for (bool special : {true, false}) {
    auto ids = tok.encode(s, {.add_special_tokens = false, .parse_special = special});
    std::string raw;
    for (int32_t id : ids) raw += tok.token_bytes(id);
    FUZZ_CHECK(raw == s);
    std::string dec = tok.decode(ids);
    FUZZ_CHECK(utf8_valid(dec));
    FUZZ_CHECK(dec == utf8_lossy(s));
    StreamDecoder sd(tok);
    std::string out;
    for (int32_t id : ids) out += sd.push(id);
    out += sd.finish();
    FUZZ_CHECK(out == dec);
  }
}

void template_engine(const uint8_t* data, size_t size) {
  std::string src(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"r"}],
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}],
          "add_generation_prompt":true,"xs":[1,2,3],"d":{"a":"b"}})");
  try {
    ChatTemplate t(src, "fuzz");
    (void)t.render(ctx);
  } catch (const nemo::Error&) {
  }
}

void output_parser(const uint8_t* data, size_t size) {
  if (size == 0) return;
  OutputParserOptions o;
  o.start_in_reasoning = data[0] & 1;
  OutputParser p(o);
  std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
  size_t step = 1 + data[0] % 7;
  for (size_t i = 0; i < s.size(); i += step) (void)p.push(std::string_view(s).substr(i, step));
  (void)p.finish();
}

}  // namespace nemo::text::fuzz
