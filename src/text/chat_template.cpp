#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "text/jinja.h"

namespace nemo::text {

struct ChatTemplate::Program {
  jinja::Template tmpl;
};

ChatTemplate::ChatTemplate(std::string_view source, const std::string& name)
    : prog_(std::make_unique<Program>(Program{jinja::Template(source, name)})) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return prog_->tmpl.render(context);
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, const ChatOptions& opts) const {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  // OpenAI clients send tool-call arguments as a JSON string; templates iterate a mapping.
  if (ctx["messages"].is_array())
    for (auto& m : ctx["messages"]) {
      if (!m.is_object()) continue;
      // OpenAI content parts [{"type":"text","text":…}] -> one string (templates expect text).
      if (m.contains("content") && m["content"].is_array()) {
        std::string text;
        bool all_text = true;
        for (const auto& part : m["content"]) {
          if (part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") && part["text"].is_string())
            text += part["text"].get<std::string>();
          else
            all_text = false;
        }
        if (all_text) m["content"] = text;
      }
      if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
      for (auto& tc : m["tool_calls"]) {
        if (!tc.is_object()) continue;
        auto& fn = tc.contains("function") && tc["function"].is_object() ? tc["function"] : tc;
        if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
        try {
          auto parsed = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>());
          if (parsed.is_object()) fn["arguments"] = std::move(parsed);
        } catch (const nlohmann::ordered_json::exception&) {
        }
      }
    }
  if (!opts.tools.is_null()) ctx["tools"] = opts.tools;
  ctx["add_generation_prompt"] = opts.add_generation_prompt;
  if (opts.enable_thinking) ctx["enable_thinking"] = *opts.enable_thinking;
  ctx["bos_token"] = opts.bos_token;
  ctx["eos_token"] = opts.eos_token;
  if (opts.extra.is_object())
    for (auto it = opts.extra.begin(); it != opts.extra.end(); ++it) ctx[it.key()] = it.value();
  return render(ctx);
}

std::optional<std::string> load_chat_template(const std::filesystem::path& dir) {
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) fail("cannot open {}", p.string());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  auto jinja_file = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) return slurp(jinja_file);
  auto cfg = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(cfg)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(slurp(cfg));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", cfg.string(), e.what());
  }
  if (!j.is_object() || !j.contains("chat_template")) return std::nullopt;
  const auto& ct = j["chat_template"];
  if (ct.is_string()) return ct.get<std::string>();
  if (ct.is_array())
    for (const auto& e : ct)
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return std::nullopt;
}

}  // namespace nemo::text
