// Jinja tests (`x is defined`, `n is divisibleby 3`, `a is lt b`).
#pragma once
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace nemo::text::jinja {

bool is_test(std::string_view name);  // the tests the parser accepts
// `v is name(a...)`; a.pos[0] is the test's argument where it takes one.
bool apply_test(const std::string& name, const Value& v, const Args& a, const Site& at);

}  // namespace nemo::text::jinja
