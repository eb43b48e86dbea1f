// The public Template (text/jinja.h): lex and parse once, render many times.
#include <utility>

#include "text/jinja.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/renderer.h"

namespace nemo::text::jinja {

struct Template::Impl {
  std::string name;
  Body body;
};

Template::Template(std::string_view source, std::string name, Options opts)
    : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  auto chunks = lex_template(std::string(source), impl_->name, opts);
  impl_->body = parse_template(chunks, impl_->name);
}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const nlohmann::ordered_json& globals) const {
  return jinja::render(impl_->body, impl_->name, globals);
}

}  // namespace nemo::text::jinja
