// Jinja2 subset engine (internal to the text layer; use chat_template.h).
// Semantics follow Python Jinja2 3.x as configured by Hugging Face transformers for chat
// templates: trim_blocks, lstrip_blocks, loopcontrols, `tojson` = json.dumps(ensure_ascii=False).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nemo::text::jinja {

struct Options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

class Template {
 public:
  // Throws nemo::Error "<name>:<line>: <what>" on unsupported or malformed syntax.
  Template(std::string_view source, std::string name, Options opts = {});
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();
  // `globals` must be a JSON object; key order is kept (Python dict order).
  std::string render(const nlohmann::ordered_json& globals) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::text::jinja
