// Jinja filters (`x | tojson`, `xs | map(attribute='name') | join(', ')`).
#pragma once
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace nemo::text::jinja {

bool is_filter(std::string_view name);  // the filters the parser accepts
// `v | name(a...)`.
Value apply_filter(const std::string& name, const Value& v, const Args& a, const Site& at);

}  // namespace nemo::text::jinja
