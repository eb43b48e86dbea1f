#include "fuzz_targets.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

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

std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}
}  // namespace

Outcome tokenizer_roundtrip(const uint8_t* data, size_t size) {
  const Tokenizer& tok = tokenizer();
  const std::string s = as_string(data, size);
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
  return Outcome::Accepted;
}

Outcome tokenizer_json(const uint8_t* data, size_t size) {
  const std::string src = as_string(data, size);
  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::from_json(src, {}, "fuzz"));
  } catch (const nemo::Error&) {
    return Outcome::Rejected;
  }
  const std::string text = "Hello, world! 東京 😀 <|im_start|>x\xC3 " + src.substr(0, 64);
  for (bool special : {true, false}) {
    const EncodeOptions eo{.add_special_tokens = special, .parse_special = special};
    const auto ids = tok->encode(text, eo);
    FUZZ_CHECK(tok->encode(text, eo) == ids);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
    FUZZ_CHECK(utf8_valid(tok->decode(ids)));
  }
  return Outcome::Accepted;
}

Outcome template_engine(const uint8_t* data, size_t size) {
  const std::string src = as_string(data, size);
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"r"}],
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}],
          "add_generation_prompt":true,"xs":[1,2,3],"d":{"a":"b"}})");
  std::optional<ChatTemplate> t;
  try {
    t.emplace(src, "fuzz");
  } catch (const nemo::Error&) {
    return Outcome::Rejected;
  }
  std::string out;
  try {
    out = t->render(ctx);
  } catch (const nemo::Error& e) {
    // Deterministic failure: the same error again, and from a fresh parse.
    const std::string msg = e.what();
    for (int k = 0; k < 2; ++k) {
      try {
        (void)(k ? ChatTemplate(src, "fuzz").render(ctx) : t->render(ctx));
        FUZZ_CHECK(false);
      } catch (const nemo::Error& e2) {
        FUZZ_CHECK(e2.what() == msg);
      }
    }
    return Outcome::Rejected;
  }
  FUZZ_CHECK(t->render(ctx) == out);
  FUZZ_CHECK(ChatTemplate(src, "fuzz").render(ctx) == out);
  return Outcome::Accepted;
}

Outcome output_parser(const uint8_t* data, size_t size) {
  if (size == 0) return Outcome::Rejected;
  OutputParserOptions o;
  o.start_in_reasoning = data[0] & 1;
  o.parse_reasoning = !(data[0] & 2);
  o.parse_tool_calls = !(data[0] & 4);
  const std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  // Feeds `s` in pieces of `step` bytes (0: whole) and concatenates every delta.
  auto run = [&](size_t step) {
    OutputParser p(o);
    ParsedOutput r;
    auto add = [&](OutputDelta d) {
      r.reasoning_content += d.reasoning;
      r.content += d.content;
      for (auto& c : d.tool_calls) r.tool_calls.push_back(std::move(c));
    };
    if (step == 0) add(p.push(s));
    for (size_t i = 0; step && i < s.size(); i += step) add(p.push(s.substr(i, step)));
    add(p.finish());
    return r;
  };
  const ParsedOutput whole = run(0);
  for (size_t step : {size_t(1), size_t(2 + (data[0] >> 3) % 9)}) {
    const ParsedOutput r = run(step);
    FUZZ_CHECK(r.reasoning_content == whole.reasoning_content);
    FUZZ_CHECK(r.content == whole.content);
    FUZZ_CHECK(r.tool_calls.size() == whole.tool_calls.size());
    for (size_t i = 0; i < r.tool_calls.size(); ++i) {
      FUZZ_CHECK(r.tool_calls[i].id == whole.tool_calls[i].id);
      FUZZ_CHECK(r.tool_calls[i].name == whole.tool_calls[i].name);
      FUZZ_CHECK(r.tool_calls[i].arguments == whole.tool_calls[i].arguments);
      FUZZ_CHECK(nlohmann::json::accept(r.tool_calls[i].arguments));
    }
  }
  const ParsedOutput once = parse_output(s, o);
  FUZZ_CHECK(once.reasoning_content == whole.reasoning_content && once.content == whole.content &&
             once.tool_calls.size() == whole.tool_calls.size());
  return whole.tool_calls.empty() ? Outcome::Rejected : Outcome::Accepted;
}

}  // namespace nemo::text::fuzz
