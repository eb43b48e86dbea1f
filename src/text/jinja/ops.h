// Python semantics of Jinja operators on Values: iteration, attributes, subscripts and slices,
// comparisons, arithmetic and concatenation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "text/jinja/value.h"

namespace nemo::text::jinja {

// Bound on the rendered output and on any string built on the way (a rendered prompt of a
// million-token context is ~5 MB of text).
constexpr size_t kMaxOutput = size_t(32) << 20;
// Bound on the items of a list built on the way (range(), +, *): a Value is tens of bytes.
constexpr size_t kMaxListItems = 1000000;

// `for x in v`: list items, dict keys, string code points; undefined is empty.
List iterate(const Value& v, const Site& at);
// `obj.n`: dict key, or list index for a numeric n; undefined otherwise.
Value getattr(const Value& obj, const std::string& n, const Site& at);
// `obj[key]`: undefined for a missing key or an index out of range.
Value getitem(const Value& obj, const Value& key, const Site& at);
// `obj[start:stop:step]` on a list or string (absent bounds are nullopt).
Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step, const Site& at);
// `a op b` for op in == != < > <= >= in notin.
bool compare(const std::string& op, const Value& a, const Value& b, const Site& at);
// `a op b` for op in ~ + - * / // % **.
Value binop(const std::string& op, const Value& a, const Value& b, const Site& at);

}  // namespace nemo::text::jinja
