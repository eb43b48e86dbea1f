// Jinja values: Python-compatible str / repr / json.dumps printing, truthiness, equality.
#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "text/unicode.h"

namespace nemo::text::jinja {

using ojson = nlohmann::ordered_json;

void err(const std::string& name, int line, const std::string& msg) {
  fail("{}:{}: {}", name, line, msg);
}

const char* type_name(const Value& v) {
  switch (v.t) {
    case VT::Undefined:
      return "undefined";
    case VT::None:
      return "none";
    case VT::Bool:
      return "bool";
    case VT::Int:
      return "int";
    case VT::Float:
      return "float";
    case VT::Str:
      return "str";
    case VT::List:
      return v.tuple ? "tuple" : "list";
    case VT::Dict:
      return v.d->is_namespace ? "namespace" : "dict";
    case VT::Func:
      return "function";
    case VT::Macro:
      return "macro";
  }
  return "?";
}

Value from_json(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null:
      return Value::none();
    case ojson::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case ojson::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case ojson::value_t::number_float:
      return Value::number(j.get<double>());
    case ojson::value_t::string:
      return Value::str(j.get<std::string>());
    case ojson::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case ojson::value_t::object: {
      Value v = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        v.d->items.emplace_back(it.key(), from_json(it.value()));
      return v;
    }
    default:
      return Value();
  }
}

namespace {

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (int(digits.size()) <= exp + 1) {
        out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out.append("0.").append(size_t(-exp - 1), '0').append(digits);
    }
  } else {
    out += digits.substr(0, 1);
    // (appends, not "." + substr: GCC 12 warns falsely (-Wrestrict) on a literal + string&&.)
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

bool py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xF8FF) ||
      (c >= 0xFFF9 && c <= 0xFFFB) || c >= 0xF0000)
    return false;
  return true;
}

std::string py_repr_str(const std::string& s) {
  bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (cp == kInvalidCp) cp = static_cast<unsigned char>(s[i]);
    if (cp == '\\')
      out += "\\\\";
    else if (cp == char32_t(q)) {
      out += '\\';
      out += q;
    } else if (cp == '\n')
      out += "\\n";
    else if (cp == '\r')
      out += "\\r";
    else if (cp == '\t')
      out += "\\t";
    else if (!py_printable(cp)) {
      char b[16];
      if (cp < 0x100)
        std::snprintf(b, sizeof b, "\\x%02x", unsigned(cp));
      else if (cp < 0x10000)
        std::snprintf(b, sizeof b, "\\u%04x", unsigned(cp));
      else
        std::snprintf(b, sizeof b, "\\U%08x", unsigned(cp));
      out += b;
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  out += q;
  return out;
}

}  // namespace

std::string py_repr(const Value& v) {
  if (v.t == VT::Str) return py_repr_str(v.s);
  if (v.t == VT::List) {
    std::string o = v.tuple ? "(" : "[";
    for (size_t k = 0; k < v.l->size(); ++k) {
      if (k) o += ", ";
      o += py_repr((*v.l)[k]);
    }
    if (v.tuple && v.l->size() == 1) o += ",";
    return o + (v.tuple ? ")" : "]");
  }
  if (v.t == VT::Dict) {
    if (v.d->is_namespace) return "<Namespace>";
    std::string o = "{";
    bool first = true;
    for (const auto& [k, x] : v.d->items) {
      if (!first) o += ", ";
      first = false;
      o += py_repr_str(k) + ": " + py_repr(x);
    }
    return o + "}";
  }
  return py_str(v);
}

std::string py_str(const Value& v) {
  switch (v.t) {
    case VT::Undefined:
      return "";
    case VT::None:
      return "None";
    case VT::Bool:
      return v.b ? "True" : "False";
    case VT::Int:
      return std::to_string(v.i);
    case VT::Float:
      return py_float(v.f);
    case VT::Str:
      return v.s;
    case VT::List:
    case VT::Dict:
      return py_repr(v);
    case VT::Func:
      return "<function>";
    case VT::Macro:
      return "<macro>";
  }
  return "";
}

namespace {

void json_str(const std::string& s, std::string& o) {
  o += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\b':
        o += "\\b";
        break;
      case '\f':
        o += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += char(c);
        }
    }
  }
  o += '"';
}

bool json_dump(const Value& v, int indent, bool sort, int level, std::string& o) {
  auto nl = [&](int lv) {
    if (indent < 0) return;
    o += '\n';
    o.append(size_t(indent * lv), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.t) {
    case VT::None:
      o += "null";
      return true;
    case VT::Bool:
      o += v.b ? "true" : "false";
      return true;
    case VT::Int:
      o += std::to_string(v.i);
      return true;
    case VT::Float:
      if (std::isnan(v.f))
        o += "NaN";
      else if (std::isinf(v.f))
        o += v.f > 0 ? "Infinity" : "-Infinity";
      else
        o += py_float(v.f);
      return true;
    case VT::Str:
      json_str(v.s, o);
      return true;
    case VT::List: {
      if (v.l->empty()) {
        o += "[]";
        return true;
      }
      o += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) o += item_sep;
        nl(level + 1);
        if (!json_dump((*v.l)[k], indent, sort, level + 1, o)) return false;
      }
      nl(level);
      o += ']';
      return true;
    }
    case VT::Dict: {
      if (v.d->is_namespace) return false;
      if (v.d->items.empty()) {
        o += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : v.d->items) items.push_back(&it);
      if (sort)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      o += '{';
      bool first = true;
      for (const auto* it : items) {
        if (!first) o += item_sep;
        first = false;
        nl(level + 1);
        json_str(it->first, o);
        o += ": ";
        if (!json_dump(it->second, indent, sort, level + 1, o)) return false;
      }
      nl(level);
      o += '}';
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

bool py_json(const Value& v, int indent, bool sort, std::string& o) {
  return json_dump(v, indent, sort, 0, o);
}

bool truthy(const Value& v) {
  switch (v.t) {
    case VT::Undefined:
    case VT::None:
      return false;
    case VT::Bool:
      return v.b;
    case VT::Int:
      return v.i != 0;
    case VT::Float:
      return v.f != 0;
    case VT::Str:
      return !v.s.empty();
    case VT::List:
      return !v.l->empty();
    case VT::Dict:
      return v.d->is_namespace || !v.d->items.empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.t == VT::Float || b.t == VT::Float) return a.as_f() == b.as_f();
    return a.as_i() == b.as_i();
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case VT::Undefined:
    case VT::None:
      return true;
    case VT::Str:
      return a.s == b.s;
    case VT::List:
      if (a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case VT::Dict:
      if (a.d == b.d) return true;
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const Value* o = b.d->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default:
      return a.fn == b.fn && a.macro == b.macro;
  }
}

}  // namespace nemo::text::jinja
