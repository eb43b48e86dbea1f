// Python methods called on strings and dicts in templates (`s.split(',')`, `d.items()`).
#pragma once
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace nemo::text::jinja {

// `s.name(args)` on a string value; fails for a method not supported.
Value call_str_method(const std::string& name, const Value& s, const Args& a, const Site& at);

// get / items / keys / values. Any other name on a dict is a key (which may hold a macro).
bool is_dict_method(std::string_view name);
Value call_dict_method(const std::string& name, const Value& d, const Args& a, const Site& at);

// d.items(): a list of (key, value) tuples.
Value items_list(const Value& d);

}  // namespace nemo::text::jinja
