// String and dict methods as name -> function tables (see methods.h).
#include "text/jinja/methods.h"

#include <cstdint>
#include <vector>

#include "text/jinja/ops.h"
#include "text/jinja/strings.h"
#include "text/jinja/table.h"

namespace nemo::text::jinja {
namespace {

using MethodFn = Value (*)(const Call&);

// ------------------------------------------------------------------- str

// Argument k (or keyword nm) as a string; nullptr when absent or None.
const std::string* str_arg(const Call& c, size_t k, const char* nm) {
  const Value* v = c.args.get(k, nm);
  if (!v || v->t == VT::None) return nullptr;
  if (v->t != VT::Str) c.at.fail("str." + c.name + "() argument must be a string");
  return &v->s;
}

Value strings_list(std::vector<std::string> parts) {
  List out;
  for (auto& p : parts) out.push_back(Value::str(std::move(p)));
  return Value::list(std::move(out));
}

Value str_strip(const Call& c) {  // strip / lstrip / rstrip
  return Value::str(
      py_strip(c.v.s, c.name != "rstrip", c.name != "lstrip", str_arg(c, 0, "chars")));
}

Value str_upper(const Call& c) {
  return Value::str(ascii_upper(c.v.s));
}
Value str_lower(const Call& c) {
  return Value::str(ascii_lower(c.v.s));
}
Value str_title(const Call& c) {
  return Value::str(title(c.v.s));
}
Value str_capitalize(const Call& c) {
  return Value::str(capitalize(c.v.s));
}

Value str_split(const Call& c) {  // split / rsplit
  const std::string* sep = str_arg(c, 0, "sep");
  const Value* mx = c.args.get(1, "maxsplit");
  int64_t maxsplit = mx && mx->t == VT::Int ? mx->i : -1;
  bool from_right = c.name == "rsplit" && maxsplit >= 0;  // else rsplit splits as split does
  if (sep) {
    if (sep->empty()) c.at.fail("empty separator");
    return strings_list(from_right ? py_rsplit(c.v.s, *sep, maxsplit)
                                   : py_split(c.v.s, *sep, maxsplit));
  }
  if (from_right) c.at.fail("rsplit() without separator and with maxsplit is not supported");
  return strings_list(py_split_ws(c.v.s, maxsplit));
}

// startswith / endswith: the argument is a string or a tuple of them.
Value affix(const Call& c, bool prefix) {
  const Value* p = c.args.get(0, "prefix");
  if (!p) c.at.fail("str." + c.name + "() needs an argument");
  List opts = p->t == VT::List ? *p->l : List{*p};
  for (const auto& o : opts) {
    if (o.t != VT::Str) c.at.fail("str." + c.name + "() argument must be a string or tuple");
    if (prefix ? c.v.s.starts_with(o.s) : c.v.s.ends_with(o.s)) return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value str_startswith(const Call& c) {
  return affix(c, true);
}
Value str_endswith(const Call& c) {
  return affix(c, false);
}

Value str_replace(const Call& c) {
  const std::string* from = str_arg(c, 0, "old");
  const std::string* to = str_arg(c, 1, "new");
  if (!from || !to) c.at.fail("str.replace() needs two string arguments");
  return Value::str(replace_all(c.v.s, *from, *to, -1));
}

const std::string& sub_arg(const Call& c) {
  const std::string* sub = str_arg(c, 0, "sub");
  if (!sub) c.at.fail("str." + c.name + "() needs a string argument");
  return *sub;
}

Value str_find(const Call& c) {  // index in code points
  const std::string& sub = sub_arg(c);
  size_t f = c.v.s.find(sub);
  return Value::integer(f == std::string::npos ? -1 : int64_t(cp_len(c.v.s.substr(0, f))));
}

Value str_count(const Call& c) {
  const std::string& sub = sub_arg(c);
  if (sub.empty()) return Value::integer(int64_t(cp_len(c.v.s) + 1));
  int64_t n = 0;
  for (size_t p = c.v.s.find(sub); p != std::string::npos; p = c.v.s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Value str_join(const Call& c) {
  const Value* it = c.args.get(0, "iterable");
  if (!it) c.at.fail("str.join() needs an argument");
  std::string o;
  List items = iterate(*it, c.at);
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].t != VT::Str) c.at.fail("str.join() expects strings");
    if (k) o += c.v.s;
    o += items[k].s;
  }
  return Value::str(o);
}

constexpr Named<MethodFn> kStrMethods[] = {
    {"capitalize", str_capitalize},
    {"count", str_count},
    {"endswith", str_endswith},
    {"find", str_find},
    {"join", str_join},
    {"lower", str_lower},
    {"lstrip", str_strip},
    {"replace", str_replace},
    {"rsplit", str_split},
    {"rstrip", str_strip},
    {"split", str_split},
    {"startswith", str_startswith},
    {"strip", str_strip},
    {"title", str_title},
    {"upper", str_upper},
};
static_assert(strictly_sorted(kStrMethods));

// ------------------------------------------------------------------- dict

Value dict_get(const Call& c) {
  const Value* k = c.args.get(0, "key");
  if (!k) c.at.fail("dict.get() needs a key");
  if (k->t == VT::Str)
    if (const Value* v = c.v.d->find(k->s)) return *v;
  const Value* def = c.args.get(1, "default");
  return def ? *def : Value::none();
}

Value dict_items(const Call& c) {
  return items_list(c.v);
}

Value dict_keys(const Call& c) {
  List out;
  for (const auto& [k, v] : c.v.d->items) out.push_back(Value::str(k));
  return Value::list(std::move(out));
}

Value dict_values(const Call& c) {
  List out;
  for (const auto& [k, v] : c.v.d->items) out.push_back(v);
  return Value::list(std::move(out));
}

constexpr Named<MethodFn> kDictMethods[] = {
    {"get", dict_get},
    {"items", dict_items},
    {"keys", dict_keys},
    {"values", dict_values},
};
static_assert(strictly_sorted(kDictMethods));

}  // namespace

Value call_str_method(const std::string& name, const Value& s, const Args& a, const Site& at) {
  const auto* m = find_named(kStrMethods, name);
  if (!m) at.fail("unsupported string method '" + name + "'");
  return m->fn(Call{name, s, a, at});
}

bool is_dict_method(std::string_view name) {
  return find_named(kDictMethods, name) != nullptr;
}

Value call_dict_method(const std::string& name, const Value& d, const Args& a, const Site& at) {
  const auto* m = find_named(kDictMethods, name);
  if (!m) at.fail("unsupported dict method '" + name + "'");  // callers check is_dict_method
  return m->fn(Call{name, d, a, at});
}

Value items_list(const Value& d) {
  List out;
  for (const auto& [k, v] : d.d->items) out.push_back(Value::list({Value::str(k), v}, true));
  return Value::list(std::move(out));
}

}  // namespace nemo::text::jinja
