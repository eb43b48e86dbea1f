// Jinja filters as a name -> function table (see filters.h).
#include "text/jinja/filters.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "text/jinja/methods.h"
#include "text/jinja/ops.h"
#include "text/jinja/strings.h"
#include "text/jinja/table.h"
#include "text/jinja/tests.h"

namespace nemo::text::jinja {
namespace {

using FilterFn = Value (*)(const Call&);

// Argument k (or keyword nm) as str(), else def.
std::string str_arg(const Call& c, size_t k, const char* nm, const std::string& def) {
  const Value* x = c.args.get(k, nm);
  return x ? py_str(*x) : def;
}

// A keyword argument (for filters whose positional arguments mean something else).
const Value* kwarg(const Call& c, std::string_view name) {
  const Value* found = nullptr;
  for (const auto& [k, x] : c.args.kw)
    if (k == name) found = &x;  // the last one wins
  return found;
}

Value do_safe(const Call& c) {
  return c.v;
}
Value do_string(const Call& c) {
  return c.v.t == VT::Str ? c.v : Value::str(py_str(c.v));
}

Value do_trim(const Call& c) {
  const Value* chars = c.args.get(0, "chars");
  std::string cs = chars && chars->t == VT::Str ? chars->s : "";
  return Value::str(
      py_strip(py_str(c.v), true, true, chars && chars->t == VT::Str ? &cs : nullptr));
}

Value do_length(const Call& c) {  // length / count
  switch (c.v.t) {
    case VT::Str:
      return Value::integer(int64_t(cp_len(c.v.s)));
    case VT::List:
      return Value::integer(int64_t(c.v.l->size()));
    case VT::Dict:
      return Value::integer(int64_t(c.v.d->items.size()));
    case VT::Undefined:
      return Value::integer(0);
    default:
      c.at.fail(std::string("object of type '") + type_name(c.v) + "' has no len()");
  }
}

Value do_tojson(const Call& c) {
  const Value* ind = c.args.get(0, "indent");
  const Value* sk = c.args.get(4, "sort_keys");
  int indent = ind && ind->t == VT::Int ? int(ind->i) : -1;
  std::string o;
  if (!py_json(c.v, indent, sk && truthy(*sk), o))
    c.at.fail(std::string("tojson: object of type '") + type_name(c.v) +
              "' is not JSON serializable");
  return Value::str(o);
}

Value do_default(const Call& c) {  // default / d
  const Value* def = c.args.get(0, "default_value");
  const Value* boolean = c.args.get(1, "boolean");
  bool use = c.v.undefined() || (boolean && truthy(*boolean) && !truthy(c.v));
  return use ? (def ? *def : Value::str("")) : c.v;
}

Value do_items(const Call& c) {
  if (c.v.undefined()) return Value::list({});
  if (c.v.t != VT::Dict || c.v.d->is_namespace)
    c.at.fail("items filter: can only get item pairs from a mapping");
  return items_list(c.v);
}

Value do_dictsort(const Call& c) {
  if (c.v.t != VT::Dict) c.at.fail("dictsort expects a mapping");
  Value items = items_list(c.v);
  std::stable_sort(items.l->begin(), items.l->end(),
                   [](const Value& x, const Value& y) { return (*x.l)[0].s < (*y.l)[0].s; });
  return items;
}

Value do_list(const Call& c) {
  return Value::list(iterate(c.v, c.at));
}

Value do_join(const Call& c) {
  std::string sep = str_arg(c, 0, "d", "");
  const Value* attr = c.args.get(1, "attribute");
  std::string o;
  List items = iterate(c.v, c.at);
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) o += sep;
    o += py_str(attr ? getattr(items[k], py_str(*attr), c.at) : items[k]);
  }
  return Value::str(o);
}

Value do_upper(const Call& c) {
  return Value::str(ascii_upper(py_str(c.v)));
}
Value do_lower(const Call& c) {
  return Value::str(ascii_lower(py_str(c.v)));
}
Value do_title(const Call& c) {
  return Value::str(title(py_str(c.v)));
}
Value do_capitalize(const Call& c) {
  return Value::str(capitalize(py_str(c.v)));
}
Value do_wordcount(const Call& c) {
  return Value::integer(int64_t(py_split_ws(py_str(c.v), -1).size()));
}

Value do_replace(const Call& c) {
  const Value* cnt = c.args.get(2, "count");
  return Value::str(replace_all(py_str(c.v), str_arg(c, 0, "old", ""), str_arg(c, 1, "new", ""),
                                cnt && cnt->t == VT::Int ? cnt->i : -1));
}

Value do_escape(const Call& c) {  // escape / e
  std::string o;
  for (char ch : py_str(c.v)) {
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&#34;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += ch;
    }
  }
  return Value::str(o);
}

Value do_indent(const Call& c) {
  const Value* w = c.args.get(0, "width");
  const Value* first = c.args.get(1, "first");
  const Value* blank = c.args.get(2, "blank");
  std::string pad = w && w->t == VT::Str
                        ? w->s
                        : std::string(size_t(w ? std::max<int64_t>(0, w->as_i()) : 4), ' ');
  std::string s = py_str(c.v), o;
  size_t pos = 0;
  bool first_line = true;
  while (true) {
    size_t nl = s.find('\n', pos);
    std::string ln = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    bool do_pad =
        first_line ? (first && truthy(*first)) : (!ln.empty() || (blank && truthy(*blank)));
    if (do_pad) o += pad;
    o += ln;
    if (nl == std::string::npos) break;
    o += '\n';
    pos = nl + 1;
    first_line = false;
  }
  return Value::str(o);
}

Value do_first(const Call& c) {
  List items = iterate(c.v, c.at);
  return items.empty() ? Value() : items.front();
}

Value do_last(const Call& c) {
  List items = iterate(c.v, c.at);
  return items.empty() ? Value() : items.back();
}

Value do_reverse(const Call& c) {
  if (c.v.t == VT::Str) {
    auto chars = cps(c.v.s);
    std::string o;
    for (size_t k = chars.size(); k-- > 0;) o += chars[k];
    return Value::str(o);
  }
  List l = iterate(c.v, c.at);
  std::reverse(l.begin(), l.end());
  return Value::list(std::move(l));
}

Value do_unique(const Call& c) {
  List out;
  for (const auto& x : iterate(c.v, c.at))
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
      out.push_back(x);
  return Value::list(std::move(out));
}

// The items ordered by Python's `<`, on item.attribute when argument attr_pos (or `attribute=`)
// names one.
List sorted_items(const Call& c, size_t attr_pos) {
  List l = iterate(c.v, c.at);
  const Value* attr = c.args.get(attr_pos, "attribute");
  auto key = [&](const Value& x) { return attr ? getattr(x, py_str(*attr), c.at) : x; };
  std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
    return compare("<", key(x), key(y), c.at);
  });
  return l;
}

Value do_sort(const Call& c) {
  List l = sorted_items(c, 2);
  const Value* rev = c.args.get(0, "reverse");
  if (rev && truthy(*rev)) std::reverse(l.begin(), l.end());
  return Value::list(std::move(l));
}

Value do_min(const Call& c) {
  List l = sorted_items(c, 1);
  return l.empty() ? Value() : l.front();
}

Value do_max(const Call& c) {
  List l = sorted_items(c, 1);
  return l.empty() ? Value() : l.back();
}

Value do_sum(const Call& c) {
  Value acc = Value::integer(0);
  for (const auto& x : iterate(c.v, c.at)) acc = binop("+", acc, x, c.at);
  return acc;
}

Value do_int(const Call& c) {
  if (c.v.is_num()) return Value::integer(c.v.as_i());
  if (c.v.t == VT::Str) {
    int64_t x;
    std::string t = py_strip(c.v.s, true, true, nullptr);
    auto r = std::from_chars(t.data(), t.data() + t.size(), x);
    if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return Value::integer(x);
  }
  const Value* def = c.args.get(0, "default");
  return def ? *def : Value::integer(0);
}

Value do_float(const Call& c) {
  if (c.v.is_num()) return Value::number(c.v.as_f());
  if (c.v.t == VT::Str) {
    char* end = nullptr;
    double x = std::strtod(c.v.s.c_str(), &end);
    if (end && *end == 0 && !c.v.s.empty()) return Value::number(x);
  }
  const Value* def = c.args.get(0, "default");
  return def ? *def : Value::number(0.0);
}

Value do_abs(const Call& c) {
  if (!c.v.is_num()) c.at.fail("abs of a non-number");
  return c.v.t == VT::Float ? Value::number(std::fabs(c.v.f))
                            : Value::integer(std::llabs(c.v.as_i()));
}

Value do_round(const Call& c) {
  if (!c.v.is_num()) c.at.fail("round of a non-number");
  const Value* p = c.args.get(0, "precision");
  double m = std::pow(10.0, p ? double(p->as_i()) : 0.0);
  return Value::number(std::nearbyint(c.v.as_f() * m) / m);
}

Value do_attr(const Call& c) {
  return getattr(c.v, str_arg(c, 0, "name", ""), c.at);
}

// map('filter', args...) or map(attribute='a', default=d).
Value do_map(const Call& c) {
  List items = iterate(c.v, c.at);
  List out;
  const Value* attr = kwarg(c, "attribute");
  const Value* def = kwarg(c, "default");
  if (attr) {
    for (const auto& x : items) {
      Value r = getattr(x, py_str(*attr), c.at);
      out.push_back(r.undefined() && def ? *def : r);
    }
    return Value::list(std::move(out));
  }
  if (c.args.pos.empty() || c.args.pos[0].t != VT::Str)
    c.at.fail("map needs a filter name or attribute=");
  const std::string& fname = c.args.pos[0].s;
  if (!is_filter(fname)) c.at.fail("unsupported filter '" + fname + "'");
  Args rest;
  rest.pos.assign(c.args.pos.begin() + 1, c.args.pos.end());
  for (const auto& x : items) out.push_back(apply_filter(fname, x, rest, c.at));
  return Value::list(std::move(out));
}

// select / reject ('test', args...) test each item; selectattr / rejectattr ('attr', 'test',
// args...) test item.attr. Without a test name the test is truthiness.
Value select_items(const Call& c, bool by_attr, bool keep_if) {
  List items = iterate(c.v, c.at);
  std::string attr;
  if (by_attr) {
    if (c.args.pos.empty()) c.at.fail(c.name + " needs an attribute");
    attr = py_str(c.args.pos[0]);
  }
  size_t ti = by_attr ? 1 : 0;  // position of the test name
  List out;
  for (const auto& x : items) {
    Value subj = by_attr ? getattr(x, attr, c.at) : x;
    bool r;
    if (c.args.pos.size() <= ti) {
      r = truthy(subj);
    } else {
      std::string tname = py_str(c.args.pos[ti]);
      if (!is_test(tname)) c.at.fail("unsupported test '" + tname + "'");
      Args targs;
      targs.pos.assign(c.args.pos.begin() + ti + 1, c.args.pos.end());
      r = apply_test(tname, subj, targs, c.at);
    }
    if (r == keep_if) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value do_select(const Call& c) {
  return select_items(c, false, true);
}
Value do_reject(const Call& c) {
  return select_items(c, false, false);
}
Value do_selectattr(const Call& c) {
  return select_items(c, true, true);
}
Value do_rejectattr(const Call& c) {
  return select_items(c, true, false);
}

// Sorted by name. A null entry is a Jinja filter the parser accepts but this engine does not
// implement: a template may name it on a path it never takes; applying it fails.
constexpr Named<FilterFn> kFilters[] = {
    {"abs", do_abs},
    {"attr", do_attr},
    {"batch", nullptr},
    {"capitalize", do_capitalize},
    {"center", nullptr},
    {"count", do_length},
    {"d", do_default},
    {"default", do_default},
    {"dictsort", do_dictsort},
    {"e", do_escape},
    {"escape", do_escape},
    {"first", do_first},
    {"float", do_float},
    {"format", nullptr},
    {"indent", do_indent},
    {"int", do_int},
    {"items", do_items},
    {"join", do_join},
    {"last", do_last},
    {"length", do_length},
    {"list", do_list},
    {"lower", do_lower},
    {"map", do_map},
    {"max", do_max},
    {"min", do_min},
    {"reject", do_reject},
    {"rejectattr", do_rejectattr},
    {"replace", do_replace},
    {"reverse", do_reverse},
    {"round", do_round},
    {"safe", do_safe},
    {"select", do_select},
    {"selectattr", do_selectattr},
    {"sort", do_sort},
    {"string", do_string},
    {"striptags", nullptr},
    {"sum", do_sum},
    {"title", do_title},
    {"tojson", do_tojson},
    {"trim", do_trim},
    {"unique", do_unique},
    {"upper", do_upper},
    {"wordcount", do_wordcount},
};
static_assert(strictly_sorted(kFilters));

}  // namespace

bool is_filter(std::string_view name) {
  return find_named(kFilters, name) != nullptr;
}

Value apply_filter(const std::string& name, const Value& v, const Args& a, const Site& at) {
  const auto* f = find_named(kFilters, name);
  if (!f || !f->fn) at.fail("unsupported filter '" + name + "'");
  return f->fn(Call{name, v, a, at});
}

}  // namespace nemo::text::jinja
