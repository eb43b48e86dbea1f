// Jinja renderer: evaluates a parsed template against a JSON context.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "text/jinja/parser.h"

namespace nemo::text::jinja {

// `globals` must be a JSON object (or null: no variables); key order is kept. Throws
// "<name>:<line>: ..." on a runtime error and when the output would exceed kMaxOutput.
std::string render(const Body& body, const std::string& name,
                   const nlohmann::ordered_json& globals);

}  // namespace nemo::text::jinja
