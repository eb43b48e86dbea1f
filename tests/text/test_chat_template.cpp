#include <gtest/gtest.h>

#include "base/error.h"
#include "test_util.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"

using namespace nemo::text;
using namespace nemo::text::testing;
using ojson = nlohmann::ordered_json;

namespace {
std::string error_of(const std::string& src, const ojson& ctx = ojson::object()) {
  try {
    ChatTemplate t(src, "tmpl");
    t.render(ctx);
  } catch (const nemo::Error& e) {
    return e.what();
  }
  return "";
}
std::string shared_template(const char* name) {
  return slurp(std::filesystem::path(NEMOTRON_SHARED_DIR) / "data/chat_templates" / name);
}
}  // namespace

TEST(ChatTemplate, EmbeddedLightningIsByteIdentical) {
  std::string file = shared_template("nemotron_3_5_lightning.jinja");
  ASSERT_FALSE(file.empty()) << "shared/data/chat_templates missing";
  EXPECT_EQ(std::string(nemotron_lightning_chat_template()), file);
}

TEST(ChatTemplate, LightningGenerationPrompt) {
  ChatTemplate t(nemotron_lightning_chat_template(), "lightning");
  ojson msgs = ojson::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(t.apply(msgs), "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  ChatOptions o;
  o.enable_thinking = false;
  EXPECT_EQ(t.apply(msgs, o), "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think></think>");
}

TEST(ChatTemplate, ApplyParsesStringArguments) {
  // OpenAI clients send arguments as a JSON string; the template needs a mapping.
  ChatTemplate t(nemotron_lightning_chat_template(), "lightning");
  ojson msgs = ojson::parse(R"([{"role":"user","content":"w?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{\"city\": \"Paris\", \"days\": 3}"}}]},
    {"role":"tool","content":"sunny"}])");
  std::string out = t.apply(msgs, {});
  EXPECT_NE(out.find("<function=get>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"), std::string::npos) << out;
  EXPECT_NE(out.find("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<|im_end|>\n"), std::string::npos);
}

TEST(ChatTemplate, ApplyFlattensTextParts) {
  ChatTemplate t(nemotron_lightning_chat_template(), "lightning");
  ojson msgs = ojson::parse(R"([{"role":"user","content":[{"type":"text","text":"Hello "},{"type":"text","text":"there"}]}])");
  EXPECT_NE(t.apply(msgs).find("<|im_start|>user\nHello there<|im_end|>"), std::string::npos);
}

TEST(ChatTemplate, ErrorsNameConstructAndLine) {
  EXPECT_NE(error_of("a\n{% include 'x' %}").find("tmpl:2: unsupported statement 'include'"), std::string::npos);
  EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("tmpl:1: unsupported filter 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(error_of("\n\n{% if x is weird %}{% endif %}").find("tmpl:3: unsupported test 'weird'"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}\nabc").find("tmpl:1: missing {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("unterminated"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y recursive %}{% endfor %}").find("recursive loops are not supported"), std::string::npos);
  EXPECT_NE(error_of("\n{{ raise_exception('bad role') }}").find("tmpl:2: template raised an exception: bad role"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + u }}").find("tmpl:1: unsupported operand types for +"), std::string::npos);
  EXPECT_NE(error_of("{{ u.x }}").find("'x' of an undefined value"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x'.format(1) }}").find("unsupported string method 'format'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 }").find("unterminated '{{'"), std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("recursion too deep"), std::string::npos);
  EXPECT_NE(error_of("{% set x = [1] %}{% set x.y = 2 %}").find("only namespace objects"), std::string::npos);
  // A namespace that would hold itself (a reference cycle, never freed) is refused, at any depth;
  // the same value elsewhere, or another namespace, is fine.
  for (const char* t : {"{% set ns = namespace() %}{% set ns.n = ns %}",
                        "{% set ns = namespace() %}{% set ns.n = [1, {'a': [ns]}] %}",
                        "{% set ns = namespace(k=[]) %}{% set ns.n = {'x': ns.k, 'y': [ns]} %}"})
    EXPECT_NE(error_of(t).find("tmpl:1: cannot set attribute 'n' of namespace 'ns' to a value that holds the namespace itself"), std::string::npos) << t;
  EXPECT_EQ(ChatTemplate("{% set ns = namespace() %}{% set m = namespace() %}{% set l = [1] %}{% set ns.a = [l, l] %}{% set m.b = ns %}{{ m.b.a | length }}").render(ojson::object()), "2");
  EXPECT_NE(error_of("{% call m() %}{% endcall %}").find("unsupported statement 'call'"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '-') + "1 }}").find("nested too deeply"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += "+1";
  EXPECT_NE(error_of(chain + " }}").find("nested too deeply"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += "{% if true %}";
  EXPECT_NE(error_of(deep).find("nested too deeply"), std::string::npos);
  EXPECT_EQ(error_of("{{ messages[0].content }}", ojson::parse(R"({"messages":[{"content":"ok"}]})")), "");
  // Sizes: strings and the output up to 32 MiB (fuzz-found: a 9-byte string * 16732300 took > 20 s
  // under ASan as 16.7 M appends, each render; strings now repeat by doubling copies), lists up
  // to 10^6 items (a Value is tens of bytes: a list * n or list + list past that took gigabytes).
  EXPECT_EQ(ChatTemplate("{{ ('ab\"c' * 8000000) | length }}").render(ojson::object()), "32000000");
  EXPECT_EQ(ChatTemplate("{{ 'ab' * 3 }}{{ 0 * 'x' }}{{ [1, 2] * 2 }}").render(ojson::object()), "ababab[1, 2, 1, 2]");
  EXPECT_NE(error_of("{{ 'ab' * 16777217 }}").find("tmpl:1: sequence repetition too large"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' * 16777216 }}{{ 'a' * 16777217 }}").find("tmpl:1: output exceeds 32 MiB"), std::string::npos);
  EXPECT_NE(error_of("{{ [1, 2] * 500001 }}").find("tmpl:1: sequence repetition too large"), std::string::npos);
  EXPECT_EQ(ChatTemplate("{{ ([1, 2] * 500000) | length }}").render(ojson::object()), "1000000");
  EXPECT_NE(error_of("{% set l = range(600000) | list %}{{ (l + l) | length }}").find("tmpl:1: list too large"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000001) | length }}").find("range() too large"), std::string::npos);
}

TEST(ChatTemplate, LoadFromModelDir) {
  auto dir = std::filesystem::temp_directory_path() / "nemo_text_tmpl_dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(load_chat_template(dir).has_value());
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(load_chat_template(dir), "D");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "S"})";
  EXPECT_EQ(load_chat_template(dir), "S");
  std::ofstream(dir / "chat_template.jinja") << "J";
  EXPECT_EQ(load_chat_template(dir), "J");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, WhitespaceControlAndScoping) {
  auto r = [](const char* src, const char* ctx = "{}") { return ChatTemplate(src).render(ojson::parse(ctx)); };
  EXPECT_EQ(r("  {%- if true %}\n  X\n  {% endif %}\n  Y {# c #}\n  {# d #}\nZ\n"), "  X\n  Y Z");
  EXPECT_EQ(r("{% for x in [1,2,3] %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}{{ y }}"), "[5][][]");
  EXPECT_EQ(r("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", R"({"xs":[1,2,3]})"), "6");
  EXPECT_EQ(r("{{ d | tojson }}", R"({"d":{"z":1,"a":"é<"}})"), R"({"z": 1, "a": "é<"})");
}

// A list's all-digit attribute is an index (Jinja's `xs.0`, `map(attribute="0")`); one past int64
// or with other characters is undefined, not an escaped std::out_of_range or a partial parse.
TEST(ChatTemplate, NumericAttributeIndexesAList) {
  auto r = [](const char* src) { return ChatTemplate(src).render(ojson::parse(R"({"xs":[[7,8]]})")); };
  EXPECT_EQ(r("{{ xs[0].1 }}"), "8");
  EXPECT_EQ(r("{{ xs | map(attribute='1') | list }}"), "[8]");
  EXPECT_EQ(r("{{ (xs | map(attribute='99999999999999999999') | list)[0] is defined }}"), "False");
  EXPECT_EQ(r("{{ (xs | map(attribute='1x') | list)[0] is defined }}"), "False");
}
