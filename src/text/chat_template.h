// Chat templates: a Jinja2 subset engine that renders Hugging Face chat templates
// (both Nemotron 3 templates byte for byte as Python's Jinja2 does).
//
// Unsupported constructs fail at parse or render time with nemo::Error naming the
// construct and the template line: never silently wrong output.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace nemo::text {

struct ChatOptions {
  nlohmann::ordered_json tools;           // null: `tools` undefined in the template
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;    // nullopt: undefined (template default)
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more template variables (e.g. truncate_history_thinking)
  std::string bos_token, eos_token;       // exposed as bos_token / eos_token
};

class ChatTemplate {
 public:
  // Parses the template; throws nemo::Error("<name>:<line>: ...") on syntax errors.
  explicit ChatTemplate(std::string_view source, const std::string& name = "chat_template");
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders with `context` (a JSON object) as the global variables. ordered_json keeps
  // key order, which templates observe (tool parameters, call arguments).
  std::string render(const nlohmann::ordered_json& context) const;
  // Convenience: messages + options -> prompt text.
  std::string apply(const nlohmann::ordered_json& messages, const ChatOptions& opts = {}) const;

  struct Program;

 private:
  std::unique_ptr<Program> prog_;
};

// The model directory's template: `chat_template.jinja`, else tokenizer_config.json's
// `chat_template` (string, or the entry named "default" of a list). nullopt if neither.
std::optional<std::string> load_chat_template(const std::filesystem::path& model_dir);

}  // namespace nemo::text
