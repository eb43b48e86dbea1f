// Jinja tests as a name -> function table (see tests.h).
#include "text/jinja/tests.h"

#include <cctype>
#include <cstdint>

#include "text/jinja/ops.h"
#include "text/jinja/table.h"

namespace nemo::text::jinja {
namespace {

using TestFn = bool (*)(const Call&);

// The value tested against (`x is eq 3`, `x is lt(3)`).
const Value& arg(const Call& c) {
  if (c.args.pos.empty()) c.at.fail("test '" + c.name + "' needs an argument");
  return c.args.pos[0];
}

bool test_defined(const Call& c) {
  return !c.v.undefined();
}
bool test_undefined(const Call& c) {
  return c.v.undefined();
}
bool test_none(const Call& c) {
  return c.v.t == VT::None;
}
bool test_boolean(const Call& c) {
  return c.v.t == VT::Bool;
}
bool test_true(const Call& c) {
  return c.v.t == VT::Bool && c.v.b;
}
bool test_false(const Call& c) {
  return c.v.t == VT::Bool && !c.v.b;
}
bool test_integer(const Call& c) {
  return c.v.t == VT::Int;
}
bool test_float(const Call& c) {
  return c.v.t == VT::Float;
}
bool test_number(const Call& c) {
  return c.v.is_num();
}
bool test_string(const Call& c) {
  return c.v.t == VT::Str;
}
bool test_mapping(const Call& c) {
  return c.v.t == VT::Dict && !c.v.d->is_namespace;
}
bool test_sequence(const Call& c) {
  return c.v.t == VT::Str || c.v.t == VT::List || test_mapping(c);
}
bool test_iterable(const Call& c) {
  return test_sequence(c) || c.v.undefined();
}
bool test_callable(const Call& c) {
  return c.v.t == VT::Func || c.v.t == VT::Macro;
}

bool test_eq(const Call& c) {
  return equal(c.v, arg(c));
}
bool test_ne(const Call& c) {
  return !equal(c.v, arg(c));
}
bool test_lt(const Call& c) {
  return compare("<", c.v, arg(c), c.at);
}
bool test_gt(const Call& c) {
  return compare(">", c.v, arg(c), c.at);
}
bool test_le(const Call& c) {
  return compare("<=", c.v, arg(c), c.at);
}
bool test_ge(const Call& c) {
  return compare(">=", c.v, arg(c), c.at);
}
bool test_in(const Call& c) {
  return compare("in", c.v, arg(c), c.at);
}
bool test_sameas(const Call& c) {
  return equal(c.v, arg(c)) && c.v.t == arg(c).t;
}
bool test_escaped(const Call&) {
  return false;
}  // no markup-safe strings here

int64_t int_subject(const Call& c) {
  if (c.v.t != VT::Int && c.v.t != VT::Bool) c.at.fail("test '" + c.name + "' needs an integer");
  return c.v.as_i();
}
bool test_odd(const Call& c) {
  return int_subject(c) % 2 != 0;
}
bool test_even(const Call& c) {
  return int_subject(c) % 2 == 0;
}
bool test_divisibleby(const Call& c) {
  int64_t x = int_subject(c);
  int64_t d = arg(c).as_i();
  if (d == 0) c.at.fail("divisibleby 0");
  return x % d == 0;
}

// A string with cased letters, all lower (or all upper) case; ASCII only.
bool all_cased(const Call& c, bool lower) {
  if (c.v.t != VT::Str) return false;
  bool any = false;
  for (unsigned char ch : c.v.s) {
    if (std::isalpha(ch)) {
      any = true;
      if (lower ? std::isupper(ch) : std::islower(ch)) return false;
    }
  }
  return any;
}
bool test_lower(const Call& c) {
  return all_cased(c, true);
}
bool test_upper(const Call& c) {
  return all_cased(c, false);
}

constexpr Named<TestFn> kTests[] = {
    {"!=", test_ne},
    {"<", test_lt},
    {"<=", test_le},
    {"==", test_eq},
    {">", test_gt},
    {">=", test_ge},
    {"boolean", test_boolean},
    {"callable", test_callable},
    {"defined", test_defined},
    {"divisibleby", test_divisibleby},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"escaped", test_escaped},
    {"even", test_even},
    {"false", test_false},
    {"float", test_float},
    {"ge", test_ge},
    {"greaterthan", test_gt},
    {"gt", test_gt},
    {"in", test_in},
    {"integer", test_integer},
    {"iterable", test_iterable},
    {"le", test_le},
    {"lessthan", test_lt},
    {"lower", test_lower},
    {"lt", test_lt},
    {"mapping", test_mapping},
    {"ne", test_ne},
    {"none", test_none},
    {"number", test_number},
    {"odd", test_odd},
    {"sameas", test_sameas},
    {"sequence", test_sequence},
    {"string", test_string},
    {"true", test_true},
    {"undefined", test_undefined},
    {"upper", test_upper},
};
static_assert(strictly_sorted(kTests));

}  // namespace

bool is_test(std::string_view name) {
  return find_named(kTests, name) != nullptr;
}

bool apply_test(const std::string& name, const Value& v, const Args& a, const Site& at) {
  const auto* t = find_named(kTests, name);
  if (!t) at.fail("unsupported test '" + name + "'");
  return t->fn(Call{name, v, a, at});
}

}  // namespace nemo::text::jinja
