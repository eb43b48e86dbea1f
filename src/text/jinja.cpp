#include "text/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>

#include "base/error.h"
#include "text/unicode.h"

namespace nemo::text::jinja {
namespace {

using ojson = nlohmann::ordered_json;

// ============================================================== values

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
struct Ctx;
using Func = std::function<Value(Args&, Ctx&, int line)>;
struct MacroDef;

enum class VT : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Func, Macro };

struct Value {
  VT t = VT::Undefined;
  bool tuple = false;  // list rendered as a Python tuple
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> l;
  std::shared_ptr<Dict> d;
  std::shared_ptr<Func> fn;
  const MacroDef* macro = nullptr;

  static Value none() { Value v; v.t = VT::None; return v; }
  static Value boolean(bool x) { Value v; v.t = VT::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.t = VT::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.t = VT::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.t = VT::Str; v.s = std::move(x); return v; }
  static Value list(List x, bool tup = false) {
    Value v; v.t = VT::List; v.l = std::make_shared<List>(std::move(x)); v.tuple = tup; return v;
  }
  static Value dict();
  static Value func(Func f) { Value v; v.t = VT::Func; v.fn = std::make_shared<Func>(std::move(f)); return v; }
  bool undefined() const { return t == VT::Undefined; }
  bool is_num() const { return t == VT::Int || t == VT::Float || t == VT::Bool; }
  double as_f() const { return t == VT::Float ? f : t == VT::Int ? double(i) : double(b); }
  int64_t as_i() const { return t == VT::Int ? i : t == VT::Bool ? int64_t(b) : int64_t(f); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view k) const {
    for (const auto& [key, v] : items)
      if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, val] : items)
      if (key == k) { val = std::move(v); return; }
    items.emplace_back(k, std::move(v));
  }
};

Value Value::dict() { Value v; v.t = VT::Dict; v.d = std::make_shared<Dict>(); return v; }

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t idx, std::string_view name) const {
    if (idx < pos.size()) return &pos[idx];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

[[noreturn]] void err(const std::string& name, int line, const std::string& msg) {
  fail("{}:{}: {}", name, line, msg);
}

const char* type_name(const Value& v) {
  switch (v.t) {
    case VT::Undefined: return "undefined";
    case VT::None: return "none";
    case VT::Bool: return "bool";
    case VT::Int: return "int";
    case VT::Float: return "float";
    case VT::Str: return "str";
    case VT::List: return v.tuple ? "tuple" : "list";
    case VT::Dict: return v.d->is_namespace ? "namespace" : "dict";
    case VT::Func: return "function";
    case VT::Macro: return "macro";
  }
  return "?";
}

Value from_json(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null: return Value::none();
    case ojson::value_t::boolean: return Value::boolean(j.get<bool>());
    case ojson::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case ojson::value_t::number_float: return Value::number(j.get<double>());
    case ojson::value_t::string: return Value::str(j.get<std::string>());
    case ojson::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case ojson::value_t::object: {
      Value v = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) v.d->items.emplace_back(it.key(), from_json(it.value()));
      return v;
    }
    default: return Value();
  }
}

// ------------------------------------------------------------- Python formatting

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
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
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
    if (cp == '\\') out += "\\\\";
    else if (cp == char32_t(q)) { out += '\\'; out += q; }
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (!py_printable(cp)) {
      char b[16];
      if (cp < 0x100) std::snprintf(b, sizeof b, "\\x%02x", unsigned(cp));
      else if (cp < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", unsigned(cp));
      else std::snprintf(b, sizeof b, "\\U%08x", unsigned(cp));
      out += b;
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  out += q;
  return out;
}

std::string py_str(const Value& v);

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
    case VT::Undefined: return "";
    case VT::None: return "None";
    case VT::Bool: return v.b ? "True" : "False";
    case VT::Int: return std::to_string(v.i);
    case VT::Float: return py_float(v.f);
    case VT::Str: return v.s;
    case VT::List:
    case VT::Dict: return py_repr(v);
    case VT::Func: return "<function>";
    case VT::Macro: return "<macro>";
  }
  return "";
}

void json_str(const std::string& s, std::string& o) {
  o += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
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

// Python json.dumps(ensure_ascii=False, indent=indent, sort_keys=sort).
bool py_json(const Value& v, int indent, bool sort, int level, std::string& o) {
  auto nl = [&](int lv) {
    if (indent < 0) return;
    o += '\n';
    o.append(size_t(indent * lv), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.t) {
    case VT::None: o += "null"; return true;
    case VT::Bool: o += v.b ? "true" : "false"; return true;
    case VT::Int: o += std::to_string(v.i); return true;
    case VT::Float:
      if (std::isnan(v.f)) o += "NaN";
      else if (std::isinf(v.f)) o += v.f > 0 ? "Infinity" : "-Infinity";
      else o += py_float(v.f);
      return true;
    case VT::Str: json_str(v.s, o); return true;
    case VT::List: {
      if (v.l->empty()) { o += "[]"; return true; }
      o += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) o += item_sep;
        nl(level + 1);
        if (!py_json((*v.l)[k], indent, sort, level + 1, o)) return false;
      }
      nl(level);
      o += ']';
      return true;
    }
    case VT::Dict: {
      if (v.d->is_namespace) return false;
      if (v.d->items.empty()) { o += "{}"; return true; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : v.d->items) items.push_back(&it);
      if (sort)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      o += '{';
      bool first = true;
      for (const auto* it : items) {
        if (!first) o += item_sep;
        first = false;
        nl(level + 1);
        json_str(it->first, o);
        o += ": ";
        if (!py_json(it->second, indent, sort, level + 1, o)) return false;
      }
      nl(level);
      o += '}';
      return true;
    }
    default: return false;
  }
}

bool truthy(const Value& v) {
  switch (v.t) {
    case VT::Undefined:
    case VT::None: return false;
    case VT::Bool: return v.b;
    case VT::Int: return v.i != 0;
    case VT::Float: return v.f != 0;
    case VT::Str: return !v.s.empty();
    case VT::List: return !v.l->empty();
    case VT::Dict: return v.d->is_namespace || !v.d->items.empty();
    default: return true;
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
    case VT::None: return true;
    case VT::Str: return a.s == b.s;
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
    default: return a.fn == b.fn && a.macro == b.macro;
  }
}

size_t cp_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
std::vector<std::string> cps(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Python str.isspace() set (used by strip/split without arguments).
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars) {
  auto v = cps(s);
  auto is_strip = [&](const std::string& c) {
    if (chars) return chars->find(c) != std::string::npos;
    char32_t cp;
    utf8_next(c, 0, cp);
    return cp != kInvalidCp && py_space(cp);
  };
  size_t b = 0, e = v.size();
  if (left) while (b < e && is_strip(v[b])) ++b;
  if (right) while (e > b && is_strip(v[e - 1])) --e;
  std::string o;
  for (size_t k = b; k < e; ++k) o += v[k];
  return o;
}

// ============================================================== lexer

enum class TK { Name, Str, Int, Float, Op, End };
struct Tok {
  TK k;
  std::string s;
  int64_t i = 0;
  double f = 0;
  int line = 0;
};

struct Chunk {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;       // Text
  std::vector<Tok> toks;  // Expr / Stmt
  int line;
};

std::string unescape(std::string_view s, const std::string& name, int line) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) { o += s[i]; continue; }
    char c = s[++i];
    auto hex = [&](int n) -> char32_t {
      if (i + n >= s.size() + 0 && i + n > s.size() - 1 + 1) err(name, line, "truncated escape in string literal");
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i + 1 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])))
          err(name, line, "bad escape in string literal");
        char h = s[++i];
        v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (c) {
      case 'n': o += '\n'; break;
      case 't': o += '\t'; break;
      case 'r': o += '\r'; break;
      case '\\': o += '\\'; break;
      case '\'': o += '\''; break;
      case '"': o += '"'; break;
      case 'a': o += '\a'; break;
      case 'b': o += '\b'; break;
      case 'f': o += '\f'; break;
      case 'v': o += '\v'; break;
      case '\n': break;
      case 'x': utf8_append(o, hex(2)); break;
      case 'u': utf8_append(o, hex(4)); break;
      case 'U': utf8_append(o, hex(8)); break;
      case 'N': err(name, line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          char32_t v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) v = v * 8 + (s[++i] - '0');
          utf8_append(o, v);
        } else {
          o += '\\';
          o += c;
        }
    }
  }
  return o;
}

std::vector<Tok> lex_expr(std::string_view src, int line, const std::string& name) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < src.size()) {
    char c = src[i];
    if (c == '\n') { ++line; ++i; continue; }
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      out.push_back({TK::Name, std::string(src.substr(i, j - i)), 0, 0, line});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool flt = false;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      if (j + 1 < src.size() && src[j] == '.' && std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        flt = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E')) {
        size_t k = j + 1;
        if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
        if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
          flt = true;
          j = k;
          while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
        }
      }
      std::string num;
      for (char ch : src.substr(i, j - i))
        if (ch != '_') num += ch;
      Tok t{flt ? TK::Float : TK::Int, num, 0, 0, line};
      if (flt) t.f = std::strtod(num.c_str(), nullptr);
      else {
        auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
        if (r.ec != std::errc()) err(name, line, "integer literal out of range: " + num);
      }
      out.push_back(t);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < src.size() && src[j] != c) {
        if (src[j] == '\\') ++j;
        if (j < src.size() && src[j] == '\n') ++line;
        ++j;
      }
      if (j >= src.size()) err(name, line, "unterminated string literal");
      out.push_back({TK::Str, unescape(src.substr(i + 1, j - i - 1), name, line), 0, 0, line});
      i = j + 1;
      continue;
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ".",
                                ":", "|", "~", "+", "-", "*", "/", "%", "=", "<", ">"};
    bool found = false;
    for (const char* op : ops) {
      size_t n = std::char_traits<char>::length(op);
      if (src.substr(i, n) == op) {
        out.push_back({TK::Op, op, 0, 0, line});
        i += n;
        found = true;
        break;
      }
    }
    if (!found) err(name, line, std::string("unexpected character '") + c + "' in expression");
  }
  out.push_back({TK::End, "", 0, 0, line});
  return out;
}

// Splits the template into text / expression / statement chunks, applying Jinja's
// whitespace control (`-`, `+`, trim_blocks, lstrip_blocks).
std::vector<Chunk> lex_template(std::string src, const std::string& name, const Options& opt) {
  // Jinja normalises newlines and drops one trailing newline.
  std::string norm;
  norm.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      norm += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      norm += src[i];
    }
  }
  src.swap(norm);
  if (!opt.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();

  std::vector<Chunk> out;
  size_t i = 0;
  int line = 1;
  bool strip_next = false;  // previous tag ended with '-'
  bool trim_next = false;   // previous block tag: drop one newline
  auto count_lines = [](std::string_view s) { return int(std::count(s.begin(), s.end(), '\n')); };
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    size_t end = open == std::string::npos ? src.size() : open;
    // Leading whitespace control (consumed by the previous tag, as Jinja's lexer does).
    size_t tb = i;
    if (strip_next) {
      while (tb < end && std::isspace(static_cast<unsigned char>(src[tb]))) ++tb;
    } else if (trim_next && tb < end && src[tb] == '\n') {
      ++tb;
    }
    std::string text = src.substr(tb, end - tb);
    int text_line = line + count_lines(std::string_view(src).substr(i, tb - i));
    line += count_lines(std::string_view(src).substr(i, end - i));
    char kind = open == std::string::npos ? 0 : src[open + 1];
    char mod = (open != std::string::npos && open + 2 < src.size()) ? src[open + 2] : 0;
    if (kind && mod == '-') {
      size_t k = text.size();
      while (k > 0 && std::isspace(static_cast<unsigned char>(text[k - 1]))) --k;
      text.resize(k);
    } else if (kind && (kind == '%' || kind == '#') && mod != '+' && opt.lstrip_blocks) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      bool line_starting = tb == 0 || src[tb - 1] == '\n';
      if (l_pos > 0 || line_starting) {
        bool only_ws = true;
        for (size_t k = l_pos; k < text.size() && only_ws; ++k)
          if (text[k] != ' ' && text[k] != '\t') only_ws = false;
        if (only_ws) text.resize(l_pos);
      }
    }
    if (!text.empty()) out.push_back({Chunk::Text, std::move(text), {}, text_line});
    if (!kind) break;

    size_t body = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
    int tag_line = line;
    if (kind == '#') {
      size_t close = src.find("#}", body);
      if (close == std::string::npos) err(name, tag_line, "unterminated comment");
      strip_next = close > body && src[close - 1] == '-';
      trim_next = opt.trim_blocks && !(close > body && src[close - 1] == '+');
      line += count_lines(std::string_view(src).substr(open, close + 2 - open));
      i = close + 2;
      continue;
    }
    const char* closer = kind == '{' ? "}}" : "%}";
    // Find the closer outside string literals.
    size_t k = body;
    char quote = 0;
    for (; k + 1 < src.size(); ++k) {
      char c = src[k];
      if (quote) {
        if (c == '\\') { ++k; continue; }
        if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') { quote = c; continue; }
      if (c == closer[0] && src[k + 1] == closer[1]) break;
    }
    if (k + 1 >= src.size()) err(name, tag_line, kind == '{' ? "unterminated '{{'" : "unterminated '{%'");
    size_t close = k;
    bool rstrip = close > body && src[close - 1] == '-';
    bool plus = close > body && src[close - 1] == '+';
    size_t inner_end = (rstrip || plus) ? close - 1 : close;
    std::string_view inner = std::string_view(src).substr(body, inner_end - body);
    line += count_lines(std::string_view(src).substr(open, close + 2 - open));
    i = close + 2;
    strip_next = rstrip;
    trim_next = kind == '%' && opt.trim_blocks && !plus;
    if (kind == '%') {
      auto toks = lex_expr(inner, tag_line, name);
      if (toks[0].k == TK::Name && toks[0].s == "raw") {
        // Everything up to {% endraw %} is literal text.
        size_t p = i;
        while (true) {
          size_t q = src.find("{%", p);
          if (q == std::string::npos) err(name, tag_line, "missing {% endraw %}");
          size_t qe = src.find("%}", q);
          if (qe == std::string::npos) err(name, tag_line, "missing {% endraw %}");
          std::string_view in = std::string_view(src).substr(q + 2, qe - q - 2);
          size_t a = in.find_first_not_of(" \t\n-+");
          if (a != std::string_view::npos && in.substr(a, 6) == "endraw") {
            std::string raw = src.substr(i, q - i);
            if (strip_next) raw.erase(0, raw.find_first_not_of(" \t\n") == std::string::npos ? raw.size() : raw.find_first_not_of(" \t\n"));
            else if (trim_next && !raw.empty() && raw[0] == '\n') raw.erase(0, 1);
            if (src[q + 2] == '-') while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.pop_back();
            if (!raw.empty()) out.push_back({Chunk::Text, raw, {}, line});
            line += count_lines(std::string_view(src).substr(i, qe + 2 - i));
            strip_next = src[qe - 1] == '-';
            trim_next = opt.trim_blocks && src[qe - 1] != '+';
            i = qe + 2;
            break;
          }
          p = qe + 2;
        }
        continue;
      }
      out.push_back({Chunk::Stmt, {}, std::move(toks), tag_line});
    } else {
      out.push_back({Chunk::Expr, {}, lex_expr(inner, tag_line, name), tag_line});
    }
  }
  return out;
}

// ============================================================== AST

enum class EK {
  Lit, Name, ListLit, TupleLit, DictLit, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not,
  Bin, And, Or, Cond, Compare
};

struct Expr {
  EK k;
  int line = 0;
  Value lit;                                    // Lit
  std::string name;                             // Name / Attr / Filter / Test / Bin op
  std::vector<std::unique_ptr<Expr>> a;         // children / positional args
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kw;  // keyword args
  std::vector<std::string> ops;                 // Compare
  bool negated = false;                         // Test
};
using ExprP = std::unique_ptr<Expr>;

enum class SK { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock, Body };

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // aligned to the tail of params (nullptr = required)
  Body body;
  int line = 0;
};

struct Stmt {
  SK k;
  int line = 0;
  std::string text;                                // Text
  ExprP e;                                         // Output / Set value / For iterable
  std::vector<std::pair<ExprP, Body>> branches;    // If (cond, body)
  Body body, else_body;                            // For / SetBlock / FilterBlock / If-else
  std::vector<std::string> targets;                // For / Set names
  std::string attr;                                // Set ns.attr
  ExprP cond;                                      // For filter
  ExprP filter;                                    // SetBlock / FilterBlock filter chain (applied to Lit)
  std::unique_ptr<MacroDef> macro;
};

// ============================================================== parser

const char* const kFilters[] = {
    "safe", "string", "trim", "length", "count", "tojson", "default", "d", "items", "list", "join",
    "upper", "lower", "title", "capitalize", "replace", "first", "last", "int", "float", "abs",
    "reverse", "map", "select", "reject", "selectattr", "rejectattr", "escape", "e", "sort",
    "unique", "min", "max", "sum", "dictsort", "indent", "wordcount", "batch", "round", "center",
    "striptags", "attr", "format"};
const char* const kTests[] = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number",
    "string", "mapping", "sequence", "iterable", "callable", "eq", "equalto", "==", "ne", "!=",
    "lt", "<", "lessthan", "gt", ">", "greaterthan", "le", "<=", "ge", ">=", "in", "odd", "even",
    "divisibleby", "lower", "upper", "sameas", "escaped"};

class Parser {
 public:
  Parser(const std::vector<Tok>& t, const std::string& name) : t_(t), name_(name) {}

  ExprP expression() {
    bool top = depth_ == 0;
    ExprP e = cond();
    if (top) check_depth(*e);
    return e;
  }
  // Left-associative chains (a+b+c…, x.a.b…, |f|g…) are built iteratively but evaluated
  // recursively: bound the tree depth (computed without recursion).
  void check_depth(const Expr& root) const {
    std::vector<std::pair<const Expr*, int>> stack{{&root, 1}};
    while (!stack.empty()) {
      auto [e, d] = stack.back();
      stack.pop_back();
      if (d > 400) err(name_, e->line, "expression nested too deeply");
      for (const auto& c : e->a)
        if (c) stack.emplace_back(c.get(), d + 1);
      for (const auto& kv : e->kw)
        if (kv.second) stack.emplace_back(kv.second.get(), d + 1);
    }
  }
  bool at_end() const { return t_[p_].k == TK::End; }
  const Tok& peek(size_t o = 0) const { return t_[std::min(p_ + o, t_.size() - 1)]; }
  bool is_name(const char* s, size_t o = 0) const { return peek(o).k == TK::Name && peek(o).s == s; }
  bool is_op(const char* s, size_t o = 0) const { return peek(o).k == TK::Op && peek(o).s == s; }
  const Tok& next() { const Tok& t = t_[p_]; if (p_ + 1 < t_.size()) ++p_; return t; }
  void expect_op(const char* s) {
    if (!is_op(s)) fail_here(std::string("expected '") + s + "'");
    next();
  }
  std::string expect_name() {
    if (peek().k != TK::Name) fail_here("expected a name");
    return next().s;
  }
  void expect_end() {
    if (!at_end()) fail_here("unexpected '" + peek().s + "'");
  }
  [[noreturn]] void fail_here(const std::string& msg) const {
    const Tok& t = peek();
    err(name_, t.line, msg + (t.k == TK::End ? " at end of tag" : ""));
  }
  int line() const { return peek().line; }

  ExprP make(EK k) {
    // Bounds the tree size too (its destruction is recursive).
    if (++nodes_ > 20000) fail_here("expression nested too deeply (too many nodes)");
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line();
    return e;
  }

  ExprP cond() {
    Guard guard(*this);
    ExprP a = or_();
    while (is_name("if")) {
      next();
      auto c = make(EK::Cond);
      ExprP test = or_();
      ExprP other;
      if (is_name("else")) { next(); other = cond(); }
      c->a.push_back(std::move(test));
      c->a.push_back(std::move(a));
      c->a.push_back(std::move(other));
      a = std::move(c);
    }
    return a;
  }
  ExprP or_() {
    ExprP a = and_();
    while (is_name("or")) {
      next();
      auto n = make(EK::Or);
      n->a.push_back(std::move(a));
      n->a.push_back(and_());
      a = std::move(n);
    }
    return a;
  }
  ExprP and_() {
    ExprP a = not_();
    while (is_name("and")) {
      next();
      auto n = make(EK::And);
      n->a.push_back(std::move(a));
      n->a.push_back(not_());
      a = std::move(n);
    }
    return a;
  }
  ExprP not_() {
    Guard guard(*this);
    if (is_name("not")) {
      auto n = make(EK::Not);
      next();
      n->a.push_back(not_());
      return n;
    }
    return compare();
  }
  ExprP compare() {
    ExprP a = math1();
    ExprP cmp;
    while (true) {
      std::string op;
      if (peek().k == TK::Op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                 peek().s == "<=" || peek().s == ">=")) {
        op = next().s;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(EK::Compare);
        cmp->a.push_back(std::move(a));
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(math1());
    }
    return cmp ? std::move(cmp) : std::move(a);
  }
  ExprP bin(ExprP a, const std::string& op, ExprP b) {
    auto n = make(EK::Bin);
    n->name = op;
    n->a.push_back(std::move(a));
    n->a.push_back(std::move(b));
    return n;
  }
  ExprP math1() {
    ExprP a = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().s;
      a = bin(std::move(a), op, concat());
    }
    return a;
  }
  ExprP concat() {
    ExprP a = math2();
    while (is_op("~")) {
      next();
      a = bin(std::move(a), "~", math2());
    }
    return a;
  }
  ExprP math2() {
    ExprP a = pow_();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().s;
      a = bin(std::move(a), op, pow_());
    }
    return a;
  }
  ExprP pow_() {
    ExprP a = unary(true);
    while (is_op("**")) {
      next();
      a = bin(std::move(a), "**", unary(true));
    }
    return a;
  }
  // Bounded nesting keeps hostile templates from exhausting the stack.
  struct Guard {
    Parser& p;
    explicit Guard(Parser& x) : p(x) {
      if (++p.depth_ > 200) p.fail_here("expression nested too deeply");
    }
    ~Guard() { --p.depth_; }
  };

  ExprP unary(bool with_filter) {
    Guard guard(*this);
    ExprP n;
    if (is_op("-") || is_op("+")) {
      n = make(is_op("-") ? EK::Neg : EK::Pos);
      next();
      n->a.push_back(unary(false));
    } else {
      n = primary();
    }
    n = postfix(std::move(n));
    if (with_filter) n = filters(std::move(n));
    return n;
  }
  ExprP primary() {
    const Tok& t = peek();
    if (t.k == TK::Name) {
      next();
      if (t.s == "true" || t.s == "True") return lit(Value::boolean(true));
      if (t.s == "false" || t.s == "False") return lit(Value::boolean(false));
      if (t.s == "none" || t.s == "None") return lit(Value::none());
      auto n = make(EK::Name);
      n->name = t.s;
      n->line = t.line;
      return n;
    }
    if (t.k == TK::Str) {
      std::string s = next().s;
      while (peek().k == TK::Str) s += next().s;  // adjacent literals concatenate
      return lit(Value::str(s));
    }
    if (t.k == TK::Int) { next(); return lit(Value::integer(t.i)); }
    if (t.k == TK::Float) { next(); return lit(Value::number(t.f)); }
    if (is_op("(")) {
      next();
      if (is_op(")")) { next(); return make(EK::TupleLit); }
      ExprP e = expression();
      if (is_op(",")) {
        auto tup = make(EK::TupleLit);
        tup->a.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          tup->a.push_back(expression());
        }
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto l = make(EK::ListLit);
      next();
      while (!is_op("]")) {
        l->a.push_back(expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      auto d = make(EK::DictLit);
      next();
      while (!is_op("}")) {
        d->a.push_back(expression());
        expect_op(":");
        d->a.push_back(expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return d;
    }
    fail_here(t.k == TK::End ? "expected an expression" : "unexpected '" + t.s + "'");
  }
  ExprP lit(Value v) {
    auto n = make(EK::Lit);
    n->lit = std::move(v);
    return n;
  }
  void call_args(Expr& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().k == TK::Name && is_op("=", 1)) {
        std::string k = next().s;
        next();
        n.kw.emplace_back(k, expression());
      } else {
        if (is_op("*") || is_op("**")) fail_here("*args / **kwargs in calls are not supported");
        n.a.push_back(expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }
  ExprP postfix(ExprP n) {
    while (true) {
      if (is_op(".")) {
        next();
        auto a = make(EK::Attr);
        if (peek().k == TK::Int) a->name = std::to_string(next().i);
        else a->name = expect_name();
        a->a.push_back(std::move(n));
        n = std::move(a);
      } else if (is_op("[")) {
        next();
        ExprP parts[3];
        bool slice = false;
        int idx = 0;
        while (true) {
          if (is_op(":")) {
            slice = true;
            next();
            if (++idx > 2) fail_here("bad slice");
            continue;
          }
          if (is_op("]")) break;
          parts[idx] = expression();
          if (!is_op(":") && !is_op("]")) fail_here("expected ']'");
        }
        expect_op("]");
        if (slice) {
          auto s = make(EK::Slice);
          s->a.push_back(std::move(n));
          for (auto& p : parts) s->a.push_back(std::move(p));
          n = std::move(s);
        } else {
          if (!parts[0]) fail_here("empty subscript");
          auto s = make(EK::Item);
          s->a.push_back(std::move(n));
          s->a.push_back(std::move(parts[0]));
          n = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = make(EK::Call);
        c->a.push_back(std::move(n));
        call_args(*c);
        n = std::move(c);
      } else {
        return n;
      }
    }
  }
  ExprP filters(ExprP n) {
    while (true) {
      if (is_op("|")) {
        next();
        auto f = make(EK::Filter);
        f->name = expect_name();
        while (is_op(".")) { next(); f->name += "." + expect_name(); }
        if (std::find(std::begin(kFilters), std::end(kFilters), f->name) == std::end(kFilters))
          err(name_, f->line, "unsupported filter '" + f->name + "'");
        f->a.push_back(std::move(n));
        if (is_op("(")) call_args(*f);
        n = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(EK::Test);
        if (is_name("not")) { next(); t->negated = true; }
        if (peek().k == TK::Name) t->name = next().s;
        else if (peek().k == TK::Op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" ||
                                        peek().s == ">" || peek().s == "<=" || peek().s == ">="))
          t->name = next().s;
        else fail_here("expected a test name after 'is'");
        if (std::find(std::begin(kTests), std::end(kTests), t->name) == std::end(kTests))
          err(name_, t->line, "unsupported test '" + t->name + "'");
        t->a.push_back(std::move(n));
        if (is_op("(")) {
          call_args(*t);
        } else if (peek().k == TK::Str || peek().k == TK::Int || peek().k == TK::Float ||
                   (peek().k == TK::Name && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("is") && !is_name("not") && !is_name("in"))) {
          t->a.push_back(primary());  // `is divisibleby 3`
          t->a.back() = postfix(std::move(t->a.back()));
        }
        n = std::move(t);
      } else {
        return n;
      }
    }
  }

 private:
  const std::vector<Tok>& t_;
  const std::string& name_;
  size_t p_ = 0;
  int depth_ = 0;
  int nodes_ = 0;
};

class TemplateParser {
 public:
  TemplateParser(std::vector<Chunk>& chunks, const std::string& name) : c_(chunks), name_(name) {}

  Body parse_all() {
    std::string end;
    Body b = body({}, end);
    return b;
  }

 private:
  // Parses statements until one of `ends` (returned in `end`, its tag left in `end_parser_`).
  Body body(const std::vector<std::string>& ends, std::string& end) {
    Body out;
    while (i_ < c_.size()) {
      Chunk& ch = c_[i_];
      if (ch.kind == Chunk::Text) {
        auto s = std::make_unique<Stmt>();
        s->k = SK::Text;
        s->line = ch.line;
        s->text = std::move(ch.text);
        out.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (ch.kind == Chunk::Expr) {
        Parser p(ch.toks, name_);
        auto s = std::make_unique<Stmt>();
        s->k = SK::Output;
        s->line = ch.line;
        s->e = p.expression();
        p.expect_end();
        out.push_back(std::move(s));
        ++i_;
        continue;
      }
      const Tok& kw = ch.toks[0];
      if (kw.k != TK::Name) err(name_, ch.line, "expected a statement name");
      if (std::find(ends.begin(), ends.end(), kw.s) != ends.end()) {
        end = kw.s;
        return out;
      }
      out.push_back(statement(ch));
    }
    if (!ends.empty()) err(name_, open_line_, "missing {% " + ends.back() + " %} (block opened here)");
    end.clear();
    return out;
  }

  Body block_until(const std::vector<std::string>& ends, std::string& end, int line) {
    if (++nesting_ > 100) err(name_, line, "blocks nested too deeply");
    int saved = open_line_;
    open_line_ = line;
    Body b = body(ends, end);
    open_line_ = saved;
    --nesting_;
    return b;
  }

  std::unique_ptr<Stmt> statement(Chunk& ch) {
    Parser p(ch.toks, name_);
    std::string kw = p.expect_name();
    auto s = std::make_unique<Stmt>();
    s->line = ch.line;
    ++i_;
    std::string end;
    if (kw == "if") {
      s->k = SK::If;
      ExprP c = p.expression();
      p.expect_end();
      while (true) {
        Body b = block_until({"elif", "else", "endif"}, end, s->line);
        s->branches.emplace_back(std::move(c), std::move(b));
        Parser ep(c_[i_].toks, name_);
        ep.expect_name();
        ++i_;
        if (end == "elif") {
          c = ep.expression();
          ep.expect_end();
          continue;
        }
        ep.expect_end();
        if (end == "else") {
          s->else_body = block_until({"endif"}, end, s->line);
          Parser ee(c_[i_].toks, name_);
          ee.expect_name();
          ee.expect_end();
          ++i_;
        }
        break;
      }
      return s;
    }
    if (kw == "for") {
      s->k = SK::For;
      s->targets.push_back(p.expect_name());
      while (p.is_op(",")) { p.next(); s->targets.push_back(p.expect_name()); }
      if (!p.is_name("in")) p.fail_here("expected 'in'");
      p.next();
      // The iterable stops before a filter `if` (no conditional expression here).
      s->e = p.or_();
      if (p.is_name("if")) { p.next(); s->cond = p.expression(); }
      if (p.is_name("recursive")) p.fail_here("recursive loops are not supported");
      p.expect_end();
      s->body = block_until({"else", "endfor"}, end, s->line);
      Parser ep(c_[i_].toks, name_);
      ep.expect_name();
      ep.expect_end();
      ++i_;
      if (end == "else") {
        s->else_body = block_until({"endfor"}, end, s->line);
        Parser ee(c_[i_].toks, name_);
        ee.expect_name();
        ee.expect_end();
        ++i_;
      }
      return s;
    }
    if (kw == "set") {
      std::string first = p.expect_name();
      if (p.is_op(".")) {
        p.next();
        s->attr = p.expect_name();
      }
      s->targets.push_back(first);
      while (p.is_op(",")) { p.next(); s->targets.push_back(p.expect_name()); }
      if (p.is_op("=")) {
        p.next();
        s->k = SK::Set;
        s->e = p.expression();
        // `set a, b = x, y`: a bare tuple on the right.
        if (p.is_op(",")) {
          auto tup = std::make_unique<Expr>();
          tup->k = EK::TupleLit;
          tup->line = s->line;
          tup->a.push_back(std::move(s->e));
          while (p.is_op(",")) { p.next(); tup->a.push_back(p.expression()); }
          s->e = std::move(tup);
        }
        p.expect_end();
        return s;
      }
      s->k = SK::SetBlock;
      if (p.is_op("|")) s->filter = filter_chain(p);
      p.expect_end();
      s->body = block_until({"endset"}, end, s->line);
      ++i_;
      return s;
    }
    if (kw == "macro") {
      s->k = SK::Macro;
      auto m = std::make_unique<MacroDef>();
      m->name = p.expect_name();
      m->line = s->line;
      p.expect_op("(");
      while (!p.is_op(")")) {
        m->params.push_back(p.expect_name());
        if (p.is_op("=")) {
          p.next();
          m->defaults.push_back(p.expression());
        } else {
          m->defaults.push_back(nullptr);
        }
        if (!p.is_op(",")) break;
        p.next();
      }
      p.expect_op(")");
      p.expect_end();
      m->body = block_until({"endmacro"}, end, s->line);
      ++i_;
      s->macro = std::move(m);
      return s;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      s->k = kw == "break" ? SK::Break : SK::Continue;
      return s;
    }
    if (kw == "filter") {
      s->k = SK::FilterBlock;
      s->filter = filter_chain(p, false);
      p.expect_end();
      s->body = block_until({"endfilter"}, end, s->line);
      ++i_;
      return s;
    }
    if (kw == "generation") {  // transformers' AssistantTracker: renders its body unchanged
      p.expect_end();
      s->k = SK::Body;
      s->body = block_until({"endgeneration"}, end, s->line);
      ++i_;
      return s;
    }
    err(name_, ch.line, "unsupported statement '" + kw + "'");
  }

  // Parses `| f(args) | g` (or `f | g` when `leading_pipe` is false) applied to a
  // placeholder literal that the renderer replaces with the block's text.
  ExprP filter_chain(Parser& p, bool leading_pipe = true) {
    auto base = std::make_unique<Expr>();
    base->k = EK::Name;
    base->line = p.line();
    base->name = " block";  // not a valid identifier: resolved to the block's text
    ExprP n = std::move(base);
    if (!leading_pipe) {
      auto f = std::make_unique<Expr>();
      f->k = EK::Filter;
      f->line = p.line();
      f->name = p.expect_name();
      if (std::find(std::begin(kFilters), std::end(kFilters), f->name) == std::end(kFilters))
        err(name_, f->line, "unsupported filter '" + f->name + "'");
      f->a.push_back(std::move(n));
      if (p.is_op("(")) p.call_args(*f);
      n = std::move(f);
    }
    return p.filters(std::move(n));
  }

  std::vector<Chunk>& c_;
  const std::string& name_;
  size_t i_ = 0;
  int open_line_ = 0;
  int nesting_ = 0;
};

}  // namespace

// ============================================================== renderer

namespace {

constexpr size_t kMaxOutput = size_t(256) << 20;
constexpr int kMaxDepth = 200;

enum class Flow { Normal, Break, Continue };

struct Ctx {
  const std::string& name;
  std::vector<std::shared_ptr<Dict>> scopes;  // [0] = template globals
  std::string* out;
  int depth = 0;
};

class Renderer {
 public:
  explicit Renderer(Ctx& c) : c_(c) {}

  Flow exec(const Body& body) {
    for (const auto& s : body) {
      Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    switch (s.k) {
      case SK::Text: emit(s.text, s.line); return Flow::Normal;
      case SK::Output: emit(py_str(eval(*s.e)), s.line); return Flow::Normal;
      case SK::Body: return exec(s.body);
      case SK::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec(body);
        return exec(s.else_body);
      case SK::For: return exec_for(s);
      case SK::Set: {
        Value v = eval(*s.e);
        assign(s, std::move(v));
        return Flow::Normal;
      }
      case SK::SetBlock: {
        std::string text = capture(s.body);
        Value v = Value::str(std::move(text));
        if (s.filter) v = with_block(*s.filter, std::move(v));
        assign(s, std::move(v));
        return Flow::Normal;
      }
      case SK::FilterBlock: {
        std::string text = capture(s.body);
        emit(py_str(with_block(*s.filter, Value::str(std::move(text)))), s.line);
        return Flow::Normal;
      }
      case SK::Macro: {
        Value v;
        v.t = VT::Macro;
        v.macro = s.macro.get();
        c_.scopes.back()->set(s.macro->name, std::move(v));
        return Flow::Normal;
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& msg) const { err(c_.name, line, msg); }

  void emit(const std::string& s, int line) {
    if (c_.out->size() + s.size() > kMaxOutput) fail_at(line, "output exceeds 256 MiB");
    c_.out->append(s);
  }

  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = c_.out;
    c_.out = &buf;
    exec(body);
    c_.out = saved;
    return buf;
  }

  Value with_block(const Expr& chain, Value text) {
    auto scope = std::make_shared<Dict>();
    scope->set(" block", std::move(text));
    c_.scopes.push_back(scope);
    Value v = eval(chain);
    c_.scopes.pop_back();
    return v;
  }

  void assign(const Stmt& s, Value v) {
    if (!s.attr.empty()) {
      Value ns = lookup(s.targets[0]);
      if (ns.t != VT::Dict || !ns.d->is_namespace)
        fail_at(s.line, "cannot set attribute '" + s.attr + "' on " + type_name(ns) + " '" + s.targets[0] + "' (only namespace objects)");
      ns.d->set(s.attr, std::move(v));
      return;
    }
    if (s.targets.size() == 1) {
      c_.scopes.back()->set(s.targets[0], std::move(v));
      return;
    }
    List items = iterate(v, s.line);
    if (items.size() != s.targets.size())
      fail_at(s.line, fmt::format("cannot unpack {} values into {} names", items.size(), s.targets.size()));
    for (size_t k = 0; k < items.size(); ++k) c_.scopes.back()->set(s.targets[k], items[k]);
  }

  Value lookup(const std::string& n) const {
    for (size_t k = c_.scopes.size(); k-- > 0;)
      if (const Value* v = c_.scopes[k]->find(n)) return *v;
    return Value();
  }

  List iterate(const Value& v, int line) {
    switch (v.t) {
      case VT::Undefined: return {};
      case VT::List: return *v.l;
      case VT::Dict: {
        if (v.d->is_namespace) fail_at(line, "namespace object is not iterable");
        List out;
        for (const auto& [k, x] : v.d->items) out.push_back(Value::str(k));
        return out;
      }
      case VT::Str: {
        List out;
        for (auto& c : cps(v.s)) out.push_back(Value::str(c));
        return out;
      }
      default: fail_at(line, std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  Flow exec_for(const Stmt& s) {
    Value seq = eval(*s.e);
    List items = iterate(seq, s.line);
    auto bind = [&](Dict& scope, const Value& item) {
      if (s.targets.size() == 1) {
        scope.set(s.targets[0], item);
        return;
      }
      List parts = iterate(item, s.line);
      if (parts.size() != s.targets.size())
        fail_at(s.line, fmt::format("cannot unpack {} values into {} loop variables", parts.size(), s.targets.size()));
      for (size_t k = 0; k < parts.size(); ++k) scope.set(s.targets[k], parts[k]);
    };
    if (s.cond) {  // filtered loop: loop.* describe the filtered sequence
      List kept;
      for (const auto& it : items) {
        auto scope = std::make_shared<Dict>();
        bind(*scope, it);
        c_.scopes.push_back(scope);
        bool keep = truthy(eval(*s.cond));
        c_.scopes.pop_back();
        if (keep) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body) == Flow::Normal ? Flow::Normal : Flow::Normal;
    size_t n = items.size();
    for (size_t idx = 0; idx < n; ++idx) {
      auto scope = std::make_shared<Dict>();
      bind(*scope, items[idx]);
      Value loop = Value::dict();
      Dict& L = *loop.d;
      L.set("index", Value::integer(int64_t(idx + 1)));
      L.set("index0", Value::integer(int64_t(idx)));
      L.set("revindex", Value::integer(int64_t(n - idx)));
      L.set("revindex0", Value::integer(int64_t(n - idx - 1)));
      L.set("first", Value::boolean(idx == 0));
      L.set("last", Value::boolean(idx + 1 == n));
      L.set("length", Value::integer(int64_t(n)));
      L.set("depth", Value::integer(1));
      L.set("depth0", Value::integer(0));
      if (idx > 0) L.set("previtem", items[idx - 1]);
      if (idx + 1 < n) L.set("nextitem", items[idx + 1]);
      L.set("cycle", Value::func([idx](Args& a, Ctx&, int) {
        if (a.pos.empty()) return Value();
        return a.pos[idx % a.pos.size()];
      }));
      scope->set("loop", std::move(loop));
      c_.scopes.push_back(scope);
      Flow f = exec(s.body);
      c_.scopes.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // ---------------------------------------------------------------- expressions

  Value eval(const Expr& e) {
    switch (e.k) {
      case EK::Lit: return e.lit;
      case EK::Name: {
        Value v = lookup(e.name);
        if (v.undefined()) return builtin(e.name, e.line);
        return v;
      }
      case EK::ListLit:
      case EK::TupleLit: {
        List l;
        for (const auto& x : e.a) l.push_back(eval(*x));
        return Value::list(std::move(l), e.k == EK::TupleLit);
      }
      case EK::DictLit: {
        Value d = Value::dict();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          Value key = eval(*e.a[k]);
          if (key.t != VT::Str) fail_at(e.line, "only string keys are supported in dict literals");
          d.d->set(key.s, eval(*e.a[k + 1]));
        }
        return d;
      }
      case EK::Attr: return getattr(eval(*e.a[0]), e.name, e.line);
      case EK::Item: return getitem(eval(*e.a[0]), eval(*e.a[1]), e.line);
      case EK::Slice: return slice(e);
      case EK::Call: return call(e);
      case EK::Filter: return filter(e);
      case EK::Test: {
        bool r = test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case EK::Neg:
      case EK::Pos: {
        Value v = eval(*e.a[0]);
        if (!v.is_num()) fail_at(e.line, std::string("bad operand type for unary ") + (e.k == EK::Neg ? "-" : "+") + ": " + type_name(v));
        if (e.k == EK::Pos) return v.t == VT::Bool ? Value::integer(v.b) : v;
        return v.t == VT::Float ? Value::number(-v.f) : Value::integer(-v.as_i());
      }
      case EK::Not: return Value::boolean(!truthy(eval(*e.a[0])));
      case EK::And: {
        Value a = eval(*e.a[0]);
        return truthy(a) ? eval(*e.a[1]) : a;
      }
      case EK::Or: {
        Value a = eval(*e.a[0]);
        return truthy(a) ? a : eval(*e.a[1]);
      }
      case EK::Cond:
        if (truthy(eval(*e.a[0]))) return eval(*e.a[1]);
        return e.a[2] ? eval(*e.a[2]) : Value();
      case EK::Compare: {
        Value left = eval(*e.a[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.a[k + 1]);
          if (!compare(e.ops[k], left, right, e.line)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case EK::Bin: return binop(e.name, eval(*e.a[0]), eval(*e.a[1]), e.line);
    }
    return Value();
  }

  Value builtin(const std::string& n, int line) {
    if (n == "namespace")
      return Value::func([](Args& a, Ctx&, int) {
        Value v = Value::dict();
        v.d->is_namespace = true;
        for (const auto& x : a.pos)
          if (x.t == VT::Dict)
            for (const auto& [k, y] : x.d->items) v.d->set(k, y);
        for (auto& [k, x] : a.kw) v.d->set(k, x);
        return v;
      });
    if (n == "range")
      return Value::func([this](Args& a, Ctx&, int ln) {
        int64_t start = 0, stop = 0, step = 1;
        for (const auto& x : a.pos)
          if (x.t != VT::Int && x.t != VT::Bool) fail_at(ln, "range() arguments must be integers");
        if (a.pos.size() == 1) stop = a.pos[0].as_i();
        else if (a.pos.size() >= 2) { start = a.pos[0].as_i(); stop = a.pos[1].as_i(); }
        if (a.pos.size() == 3) step = a.pos[2].as_i();
        if (step == 0) fail_at(ln, "range() step must not be zero");
        List l;
        for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) {
          if (l.size() > 1000000) fail_at(ln, "range() too large");
          l.push_back(Value::integer(v));
        }
        return Value::list(std::move(l));
      });
    if (n == "dict")
      return Value::func([](Args& a, Ctx&, int) {
        Value v = Value::dict();
        for (const auto& x : a.pos)
          if (x.t == VT::Dict)
            for (const auto& [k, y] : x.d->items) v.d->set(k, y);
        for (auto& [k, x] : a.kw) v.d->set(k, x);
        return v;
      });
    if (n == "raise_exception")
      return Value::func([this](Args& a, Ctx&, int ln) -> Value {
        fail_at(ln, "template raised an exception: " + (a.pos.empty() ? std::string() : py_str(a.pos[0])));
      });
    if (n == "strftime_now")
      return Value::func([](Args& a, Ctx&, int) {
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        std::string f = a.pos.empty() ? "%Y-%m-%d" : py_str(a.pos[0]);
        size_t n2 = std::strftime(buf, sizeof buf, f.c_str(), &tm);
        return Value::str(std::string(buf, n2));
      });
    (void)line;
    return Value();
  }

  Value getattr(const Value& obj, const std::string& n, int line) {
    if (obj.t == VT::Undefined) fail_at(line, "'" + n + "' of an undefined value");
    if (obj.t == VT::Dict) {
      if (const Value* v = obj.d->find(n)) return *v;
      return Value();
    }
    if (obj.t == VT::List && !n.empty() && std::isdigit(static_cast<unsigned char>(n[0])))
      return getitem(obj, Value::integer(std::stoll(n)), line);
    return Value();  // attributes of other types are undefined (methods are handled in call())
  }

  Value getitem(const Value& obj, const Value& key, int line) {
    if (obj.t == VT::Undefined) fail_at(line, "subscript of an undefined value");
    if (obj.t == VT::Dict) {
      if (key.t != VT::Str) return Value();
      if (const Value* v = obj.d->find(key.s)) return *v;
      return Value();
    }
    if (obj.t == VT::List || obj.t == VT::Str) {
      if (key.t != VT::Int && key.t != VT::Bool) {
        if (key.t == VT::Str) return Value();
        fail_at(line, std::string("indices must be integers, not ") + type_name(key));
      }
      int64_t i = key.as_i();
      if (obj.t == VT::List) {
        int64_t n = int64_t(obj.l->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return (*obj.l)[i];
      }
      auto chars = cps(obj.s);
      int64_t n = int64_t(chars.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return Value::str(chars[i]);
    }
    if (obj.t == VT::None) fail_at(line, "'NoneType' object is not subscriptable");
    return Value();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.a[0]);
    auto part = [&](int k, bool& present) -> int64_t {
      present = false;
      if (!e.a[k]) return 0;
      Value v = eval(*e.a[k]);
      if (v.t == VT::None) return 0;
      if (v.t != VT::Int && v.t != VT::Bool) fail_at(e.line, "slice indices must be integers");
      present = true;
      return v.as_i();
    };
    bool hs, he, hst;
    int64_t start = part(1, hs), stop = part(2, he), step = part(3, hst);
    if (!hst) step = 1;
    if (step == 0) fail_at(e.line, "slice step cannot be zero");
    List src;
    std::vector<std::string> chars;
    bool is_str = obj.t == VT::Str;
    int64_t n;
    if (obj.t == VT::List) n = int64_t(obj.l->size());
    else if (is_str) { chars = cps(obj.s); n = int64_t(chars.size()); }
    else if (obj.t == VT::Undefined) fail_at(e.line, "slice of an undefined value");
    else fail_at(e.line, std::string("'") + type_name(obj) + "' object is not subscriptable");
    auto norm = [&](int64_t v, bool present, int64_t def) {
      if (!present) return def;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    int64_t a = norm(start, hs, step > 0 ? 0 : n - 1), b = norm(stop, he, step > 0 ? n : -1);
    List out;
    std::string sout;
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
      if (is_str) sout += chars[i];
      else out.push_back((*obj.l)[i]);
    }
    return is_str ? Value::str(sout) : Value::list(std::move(out));
  }

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t k = first; k < e.a.size(); ++k) a.pos.push_back(eval(*e.a[k]));
    for (const auto& [k, x] : e.kw) a.kw.emplace_back(k, eval(*x));
    return a;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.a[0];
    if (callee.k == EK::Attr) {
      Value obj = eval(*callee.a[0]);
      Args a = eval_args(e, 1);
      if (obj.t == VT::Str) return str_method(obj.s, callee.name, a, e.line);
      if (obj.t == VT::Dict && !obj.d->is_namespace) {
        if (callee.name == "items" || callee.name == "keys" || callee.name == "values" || callee.name == "get")
          return dict_method(obj, callee.name, a, e.line);
      }
      Value fnv = getattr(obj, callee.name, e.line);
      return invoke(fnv, a, e.line, callee.name);
    }
    Value fnv = eval(callee);
    Args a = eval_args(e, 1);
    return invoke(fnv, a, e.line, callee.k == EK::Name ? callee.name : "expression");
  }

  Value invoke(const Value& fnv, Args& a, int line, const std::string& what) {
    if (fnv.t == VT::Func) return (*fnv.fn)(a, c_, line);
    if (fnv.t == VT::Macro) return call_macro(*fnv.macro, a, line);
    if (fnv.t == VT::Undefined) fail_at(line, "'" + what + "' is undefined or not a supported function");
    fail_at(line, std::string("'") + type_name(fnv) + "' object is not callable");
  }

  Value call_macro(const MacroDef& m, Args& a, int line) {
    if (c_.depth >= kMaxDepth) fail_at(line, "macro recursion too deep");
    auto scope = std::make_shared<Dict>();
    if (a.pos.size() > m.params.size()) fail_at(line, "macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments");
    for (size_t k = 0; k < m.params.size(); ++k) {
      const Value* v = a.get(k, m.params[k]);
      if (v) scope->set(m.params[k], *v);
      else if (m.defaults[k]) scope->set(m.params[k], eval(*m.defaults[k]));
      else scope->set(m.params[k], Value());
    }
    for (const auto& [k, v] : a.kw)
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end())
        fail_at(line, "macro '" + m.name + "' has no parameter '" + k + "'");
    // Macros see the template globals, not the caller's loop scopes.
    std::vector<std::shared_ptr<Dict>> saved;
    saved.swap(c_.scopes);
    c_.scopes.push_back(saved.front());
    c_.scopes.push_back(scope);
    ++c_.depth;
    std::string text;
    std::string* out = c_.out;
    c_.out = &text;
    exec(m.body);
    c_.out = out;
    --c_.depth;
    c_.scopes.swap(saved);
    return Value::str(std::move(text));
  }

  Value str_method(const std::string& s, const std::string& m, Args& a, int line) {
    auto arg_str = [&](size_t k, const char* nm) -> const std::string* {
      const Value* v = a.get(k, nm);
      if (!v || v->t == VT::None) return nullptr;
      if (v->t != VT::Str) fail_at(line, "str." + m + "() argument must be a string");
      return &v->s;
    };
    if (m == "strip" || m == "lstrip" || m == "rstrip")
      return Value::str(py_strip(s, m != "rstrip", m != "lstrip", arg_str(0, "chars")));
    if (m == "upper" || m == "lower") {
      std::string o = s;
      for (auto& c : o) c = m == "upper" ? char(std::toupper(static_cast<unsigned char>(c))) : char(std::tolower(static_cast<unsigned char>(c)));
      return Value::str(o);
    }
    if (m == "split" || m == "rsplit") {
      const std::string* sep = arg_str(0, "sep");
      const Value* mx = a.get(1, "maxsplit");
      int64_t maxsplit = mx && mx->t == VT::Int ? mx->i : -1;
      List out;
      if (sep) {
        if (sep->empty()) fail_at(line, "empty separator");
        if (m == "rsplit" && maxsplit >= 0) {
          std::vector<std::string> parts;
          size_t end = s.size();
          int64_t cnt = 0;
          while (cnt < maxsplit) {
            size_t f = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string::npos;
            if (f == std::string::npos) break;
            parts.push_back(s.substr(f + sep->size(), end - f - sep->size()));
            end = f;
            ++cnt;
          }
          parts.push_back(s.substr(0, end));
          for (size_t k = parts.size(); k-- > 0;) out.push_back(Value::str(parts[k]));
          return Value::list(std::move(out));
        }
        size_t pos = 0;
        int64_t cnt = 0;
        while (maxsplit < 0 || cnt < maxsplit) {
          size_t f = s.find(*sep, pos);
          if (f == std::string::npos) break;
          out.push_back(Value::str(s.substr(pos, f - pos)));
          pos = f + sep->size();
          ++cnt;
        }
        out.push_back(Value::str(s.substr(pos)));
        return Value::list(std::move(out));
      }
      if (m == "rsplit" && maxsplit >= 0) fail_at(line, "rsplit() without separator and with maxsplit is not supported");
      auto chars = cps(s);
      std::string cur;
      bool in = false;
      int64_t cnt = 0;
      for (size_t k = 0; k < chars.size(); ++k) {
        char32_t cp;
        utf8_next(chars[k], 0, cp);
        bool sp = cp != kInvalidCp && py_space(cp);
        if (sp && in && (maxsplit < 0 || cnt < maxsplit)) {
          out.push_back(Value::str(cur));
          cur.clear();
          in = false;
          ++cnt;
        } else if (!sp || in) {
          if (!in && maxsplit >= 0 && cnt >= maxsplit) {
            for (size_t r = k; r < chars.size(); ++r) cur += chars[r];
            cur = py_strip(cur, false, true, nullptr);
            in = true;
            break;
          }
          cur += chars[k];
          in = true;
        }
      }
      if (in) out.push_back(Value::str(cur));
      return Value::list(std::move(out));
    }
    if (m == "startswith" || m == "endswith") {
      const Value* p = a.get(0, "prefix");
      if (!p) fail_at(line, "str." + m + "() needs an argument");
      List opts = p->t == VT::List ? *p->l : List{*p};
      for (const auto& o : opts) {
        if (o.t != VT::Str) fail_at(line, "str." + m + "() argument must be a string or tuple");
        if (m == "startswith" ? s.starts_with(o.s) : s.ends_with(o.s)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (m == "replace") {
      const std::string* from = arg_str(0, "old");
      const std::string* to = arg_str(1, "new");
      if (!from || !to) fail_at(line, "str.replace() needs two string arguments");
      return Value::str(replace_all(s, *from, *to, -1));
    }
    if (m == "find" || m == "count") {
      const std::string* sub = arg_str(0, "sub");
      if (!sub) fail_at(line, "str." + m + "() needs a string argument");
      if (m == "find") {
        size_t f = s.find(*sub);
        return Value::integer(f == std::string::npos ? -1 : int64_t(cp_len(s.substr(0, f))));
      }
      if (sub->empty()) return Value::integer(int64_t(cp_len(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
      return Value::integer(n);
    }
    if (m == "title" || m == "capitalize") return Value::str(m == "title" ? title(s) : capitalize(s));
    if (m == "join") {
      const Value* it = a.get(0, "iterable");
      if (!it) fail_at(line, "str.join() needs an argument");
      std::string o;
      List items = iterate(*it, line);
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].t != VT::Str) fail_at(line, "str.join() expects strings");
        if (k) o += s;
        o += items[k].s;
      }
      return Value::str(o);
    }
    fail_at(line, "unsupported string method '" + m + "'");
  }

  Value dict_method(const Value& d, const std::string& m, Args& a, int line) {
    if (m == "get") {
      const Value* k = a.get(0, "key");
      if (!k) fail_at(line, "dict.get() needs a key");
      if (k->t == VT::Str)
        if (const Value* v = d.d->find(k->s)) return *v;
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    }
    List out;
    for (const auto& [k, v] : d.d->items) {
      if (m == "items") out.push_back(Value::list({Value::str(k), v}, true));
      else if (m == "keys") out.push_back(Value::str(k));
      else out.push_back(v);
    }
    return Value::list(std::move(out));
  }

  static std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    if (from.empty()) {
      std::string o = to;
      for (auto& c : cps(s)) o += c + to;
      return o;
    }
    std::string o;
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
      size_t f = s.find(from, pos);
      if (f == std::string::npos) break;
      o.append(s, pos, f - pos).append(to);
      pos = f + from.size();
      ++n;
    }
    o.append(s, pos);
    return o;
  }
  static std::string title(const std::string& s) {
    std::string o = s;
    bool prev_alpha = false;
    for (auto& c : o) {
      unsigned char u = static_cast<unsigned char>(c);
      bool alpha = std::isalpha(u);
      if (alpha) c = prev_alpha ? char(std::tolower(u)) : char(std::toupper(u));
      prev_alpha = alpha;
    }
    return o;
  }
  static std::string capitalize(const std::string& s) {
    std::string o = s;
    for (size_t k = 0; k < o.size(); ++k)
      o[k] = k == 0 ? char(std::toupper(static_cast<unsigned char>(o[k]))) : char(std::tolower(static_cast<unsigned char>(o[k])));
    return o;
  }

  // ---------------------------------------------------------------- operators

  bool compare(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "notin") {
      bool r;
      if (b.t == VT::Str) {
        if (a.t != VT::Str) fail_at(line, std::string("'in <string>' requires string as left operand, not ") + type_name(a));
        r = b.s.find(a.s) != std::string::npos;
      } else if (b.t == VT::List) {
        r = std::any_of(b.l->begin(), b.l->end(), [&](const Value& x) { return equal(a, x); });
      } else if (b.t == VT::Dict && !b.d->is_namespace) {
        r = a.t == VT::Str && b.d->find(a.s);
      } else if (b.t == VT::Undefined) {
        r = false;
      } else {
        fail_at(line, std::string("argument of type '") + type_name(b) + "' is not iterable");
      }
      return op == "in" ? r : !r;
    }
    int c;
    if (a.is_num() && b.is_num()) {
      double x = a.as_f(), y = b.as_f();
      if (a.t != VT::Float && b.t != VT::Float) c = a.as_i() < b.as_i() ? -1 : a.as_i() > b.as_i();
      else c = x < y ? -1 : x > y ? 1 : 0;
    } else if (a.t == VT::Str && b.t == VT::Str) {
      c = a.s.compare(b.s);  // UTF-8 byte order = code point order
      c = c < 0 ? -1 : c > 0;
    } else {
      fail_at(line, "'" + op + "' not supported between '" + type_name(a) + "' and '" + type_name(b) + "'");
    }
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value binop(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") {
      std::string r = py_str(a) + py_str(b);
      if (r.size() > kMaxOutput) fail_at(line, "string too large");
      return Value::str(std::move(r));
    }
    auto bad = [&]() -> Value {
      fail_at(line, "unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (a.undefined() || b.undefined()) bad();
    if (op == "+") {
      if (a.t == VT::Str && b.t == VT::Str) {
        if (a.s.size() + b.s.size() > kMaxOutput) fail_at(line, "string too large");
        return Value::str(a.s + b.s);
      }
      if (a.t == VT::List && b.t == VT::List) {
        List l = *a.l;
        l.insert(l.end(), b.l->begin(), b.l->end());
        return Value::list(std::move(l), a.tuple && b.tuple);
      }
    }
    if (op == "*") {
      const Value* seq = a.t == VT::Str || a.t == VT::List ? &a : (b.t == VT::Str || b.t == VT::List) ? &b : nullptr;
      const Value* cnt = seq == &a ? &b : &a;
      if (seq && (cnt->t == VT::Int || cnt->t == VT::Bool)) {
        int64_t n = std::max<int64_t>(0, cnt->as_i());
        size_t unit = seq->t == VT::Str ? seq->s.size() : seq->l->size();
        if (unit && uint64_t(n) > kMaxOutput / unit) fail_at(line, "sequence repetition too large");
        if (seq->t == VT::Str) {
          std::string o;
          for (int64_t k = 0; k < n; ++k) o += seq->s;
          return Value::str(o);
        }
        List l;
        for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq->l->begin(), seq->l->end());
        return Value::list(std::move(l));
      }
    }
    if (!a.is_num() || !b.is_num()) bad();
    bool fl = a.t == VT::Float || b.t == VT::Float;
    if (op == "/") {
      if (b.as_f() == 0) fail_at(line, "division by zero");
      return Value::number(a.as_f() / b.as_f());
    }
    if (op == "**") {
      if (!fl && b.as_i() >= 0) {
        double r = std::pow(double(a.as_i()), double(b.as_i()));
        if (std::fabs(r) > 9.2e18) fail_at(line, "integer power too large");
        int64_t x = 1;
        for (int64_t k = 0; k < b.as_i(); ++k) x *= a.as_i();
        return Value::integer(x);
      }
      return Value::number(std::pow(a.as_f(), b.as_f()));
    }
    if (fl) {
      double x = a.as_f(), y = b.as_f();
      if (op == "+") return Value::number(x + y);
      if (op == "-") return Value::number(x - y);
      if (op == "*") return Value::number(x * y);
      if (y == 0) fail_at(line, "division by zero");
      if (op == "//") return Value::number(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
    int64_t x = a.as_i(), y = b.as_i(), r;
    if (op == "+") { if (__builtin_add_overflow(x, y, &r)) fail_at(line, "integer overflow"); return Value::integer(r); }
    if (op == "-") { if (__builtin_sub_overflow(x, y, &r)) fail_at(line, "integer overflow"); return Value::integer(r); }
    if (op == "*") { if (__builtin_mul_overflow(x, y, &r)) fail_at(line, "integer overflow"); return Value::integer(r); }
    if (y == 0) fail_at(line, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) fail_at(line, "integer overflow");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) { m += y; --q; }
    return Value::integer(op == "//" ? q : m);
  }

  // ---------------------------------------------------------------- tests

  bool test(const Expr& e) {
    const std::string& n = e.name;
    Value v = eval(*e.a[0]);
    Args a = eval_args(e, 1);
    auto arg = [&]() -> const Value& {
      if (a.pos.empty()) fail_at(e.line, "test '" + n + "' needs an argument");
      return a.pos[0];
    };
    if (n == "defined") return !v.undefined();
    if (n == "undefined") return v.undefined();
    if (n == "none") return v.t == VT::None;
    if (n == "boolean") return v.t == VT::Bool;
    if (n == "true") return v.t == VT::Bool && v.b;
    if (n == "false") return v.t == VT::Bool && !v.b;
    if (n == "integer") return v.t == VT::Int;
    if (n == "float") return v.t == VT::Float;
    if (n == "number") return v.is_num();
    if (n == "string") return v.t == VT::Str;
    if (n == "mapping") return v.t == VT::Dict && !v.d->is_namespace;
    if (n == "sequence") return v.t == VT::Str || v.t == VT::List || (v.t == VT::Dict && !v.d->is_namespace);
    if (n == "iterable") return v.t == VT::Str || v.t == VT::List || (v.t == VT::Dict && !v.d->is_namespace) || v.undefined();
    if (n == "callable") return v.t == VT::Func || v.t == VT::Macro;
    if (n == "eq" || n == "equalto" || n == "==") return equal(v, arg());
    if (n == "ne" || n == "!=") return !equal(v, arg());
    if (n == "lt" || n == "<" || n == "lessthan") return compare("<", v, arg(), e.line);
    if (n == "gt" || n == ">" || n == "greaterthan") return compare(">", v, arg(), e.line);
    if (n == "le" || n == "<=") return compare("<=", v, arg(), e.line);
    if (n == "ge" || n == ">=") return compare(">=", v, arg(), e.line);
    if (n == "in") return compare("in", v, arg(), e.line);
    if (n == "sameas") return equal(v, arg()) && v.t == arg().t;
    if (n == "escaped") return false;
    if (n == "odd" || n == "even" || n == "divisibleby") {
      if (v.t != VT::Int && v.t != VT::Bool) fail_at(e.line, "test '" + n + "' needs an integer");
      int64_t x = v.as_i();
      if (n == "odd") return x % 2 != 0;
      if (n == "even") return x % 2 == 0;
      int64_t d = arg().as_i();
      if (d == 0) fail_at(e.line, "divisibleby 0");
      return x % d == 0;
    }
    if (n == "lower" || n == "upper") {
      if (v.t != VT::Str) return false;
      bool any = false;
      for (unsigned char c : v.s) {
        if (std::isalpha(c)) {
          any = true;
          if (n == "lower" ? std::isupper(c) : std::islower(c)) return false;
        }
      }
      return any;
    }
    fail_at(e.line, "unsupported test '" + n + "'");
  }

  // ---------------------------------------------------------------- filters

  Value apply_filter(const std::string& n, const Value& v, Args& a, int line) {
    auto str_arg = [&](size_t k, const char* nm, const std::string& def) {
      const Value* x = a.get(k, nm);
      return x ? py_str(*x) : def;
    };
    if (n == "safe") return v;
    if (n == "string") return v.t == VT::Str ? v : Value::str(py_str(v));
    if (n == "trim") {
      const Value* chars = a.get(0, "chars");
      std::string cs = chars && chars->t == VT::Str ? chars->s : "";
      return Value::str(py_strip(py_str(v), true, true, chars && chars->t == VT::Str ? &cs : nullptr));
    }
    if (n == "length" || n == "count") {
      switch (v.t) {
        case VT::Str: return Value::integer(int64_t(cp_len(v.s)));
        case VT::List: return Value::integer(int64_t(v.l->size()));
        case VT::Dict: return Value::integer(int64_t(v.d->items.size()));
        case VT::Undefined: return Value::integer(0);
        default: fail_at(line, std::string("object of type '") + type_name(v) + "' has no len()");
      }
    }
    if (n == "tojson") {
      const Value* ind = a.get(0, "indent");
      const Value* sk = a.get(4, "sort_keys");
      int indent = ind && ind->t == VT::Int ? int(ind->i) : -1;
      std::string o;
      if (!py_json(v, indent, sk && truthy(*sk), 0, o))
        fail_at(line, std::string("tojson: object of type '") + type_name(v) + "' is not JSON serializable");
      return Value::str(o);
    }
    if (n == "default" || n == "d") {
      const Value* def = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      bool use = v.undefined() || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (def ? *def : Value::str("")) : v;
    }
    if (n == "items") {
      if (v.undefined()) return Value::list({});
      if (v.t != VT::Dict || v.d->is_namespace) fail_at(line, "items filter: can only get item pairs from a mapping");
      Args none;
      return dict_method(v, "items", none, line);
    }
    if (n == "list") return Value::list(iterate(v, line));
    if (n == "join") {
      std::string sep = str_arg(0, "d", "");
      const Value* attr = a.get(1, "attribute");
      std::string o;
      List items = iterate(v, line);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) o += sep;
        o += py_str(attr ? getattr(items[k], py_str(*attr), line) : items[k]);
      }
      return Value::str(o);
    }
    if (n == "upper" || n == "lower") {
      Args none;
      return str_method(py_str(v), n, none, line);
    }
    if (n == "title") return Value::str(title(py_str(v)));
    if (n == "capitalize") return Value::str(capitalize(py_str(v)));
    if (n == "replace") {
      const Value* cnt = a.get(2, "count");
      return Value::str(replace_all(py_str(v), str_arg(0, "old", ""), str_arg(1, "new", ""),
                                    cnt && cnt->t == VT::Int ? cnt->i : -1));
    }
    if (n == "first" || n == "last") {
      List items = iterate(v, line);
      if (items.empty()) return Value();
      return n == "first" ? items.front() : items.back();
    }
    if (n == "int") {
      if (v.is_num()) return Value::integer(v.as_i());
      if (v.t == VT::Str) {
        int64_t x;
        std::string t = py_strip(v.s, true, true, nullptr);
        auto r = std::from_chars(t.data(), t.data() + t.size(), x);
        if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return Value::integer(x);
      }
      const Value* def = a.get(0, "default");
      return def ? *def : Value::integer(0);
    }
    if (n == "float") {
      if (v.is_num()) return Value::number(v.as_f());
      if (v.t == VT::Str) {
        char* end = nullptr;
        double x = std::strtod(v.s.c_str(), &end);
        if (end && *end == 0 && !v.s.empty()) return Value::number(x);
      }
      const Value* def = a.get(0, "default");
      return def ? *def : Value::number(0.0);
    }
    if (n == "abs") {
      if (!v.is_num()) fail_at(line, "abs of a non-number");
      return v.t == VT::Float ? Value::number(std::fabs(v.f)) : Value::integer(std::llabs(v.as_i()));
    }
    if (n == "round") {
      if (!v.is_num()) fail_at(line, "round of a non-number");
      const Value* p = a.get(0, "precision");
      double m = std::pow(10.0, p ? double(p->as_i()) : 0.0);
      return Value::number(std::nearbyint(v.as_f() * m) / m);
    }
    if (n == "reverse") {
      if (v.t == VT::Str) {
        auto c = cps(v.s);
        std::string o;
        for (size_t k = c.size(); k-- > 0;) o += c[k];
        return Value::str(o);
      }
      List l = iterate(v, line);
      std::reverse(l.begin(), l.end());
      return Value::list(std::move(l));
    }
    if (n == "unique") {
      List out;
      for (const auto& x : iterate(v, line))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
      return Value::list(std::move(out));
    }
    if (n == "sort" || n == "min" || n == "max") {
      List l = iterate(v, line);
      const Value* attr = a.get(n == "sort" ? 2 : 1, "attribute");
      const Value* rev = n == "sort" ? a.get(0, "reverse") : nullptr;
      auto key = [&](const Value& x) { return attr ? getattr(x, py_str(*attr), line) : x; };
      std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) { return compare("<", key(x), key(y), line); });
      if (rev && truthy(*rev)) std::reverse(l.begin(), l.end());
      if (n == "sort") return Value::list(std::move(l));
      if (l.empty()) return Value();
      return n == "min" ? l.front() : l.back();
    }
    if (n == "sum") {
      Value acc = Value::integer(0);
      for (const auto& x : iterate(v, line)) acc = binop("+", acc, x, line);
      return acc;
    }
    if (n == "dictsort") {
      if (v.t != VT::Dict) fail_at(line, "dictsort expects a mapping");
      Args none;
      Value items = dict_method(v, "items", none, line);
      std::stable_sort(items.l->begin(), items.l->end(), [](const Value& x, const Value& y) { return (*x.l)[0].s < (*y.l)[0].s; });
      return items;
    }
    if (n == "map" || n == "select" || n == "reject" || n == "selectattr" || n == "rejectattr") {
      List items = iterate(v, line);
      List out;
      if (n == "map") {
        const Value* attr = nullptr;
        for (const auto& [k, x] : a.kw)
          if (k == "attribute") attr = &x;
        const Value* def = nullptr;
        for (const auto& [k, x] : a.kw)
          if (k == "default") def = &x;
        if (attr) {
          for (const auto& x : items) {
            Value r = getattr(x, py_str(*attr), line);
            out.push_back(r.undefined() && def ? *def : r);
          }
          return Value::list(std::move(out));
        }
        if (a.pos.empty() || a.pos[0].t != VT::Str) fail_at(line, "map needs a filter name or attribute=");
        std::string fname = a.pos[0].s;
        if (std::find(std::begin(kFilters), std::end(kFilters), fname) == std::end(kFilters))
          fail_at(line, "unsupported filter '" + fname + "'");
        Args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        for (const auto& x : items) out.push_back(apply_filter(fname, x, rest, line));
        return Value::list(std::move(out));
      }
      bool by_attr = n == "selectattr" || n == "rejectattr";
      bool want = n == "select" || n == "selectattr";
      size_t ti = by_attr ? 1 : 0;
      std::string attr = by_attr ? (a.pos.empty() ? fail_at(line, n + " needs an attribute"), std::string() : py_str(a.pos[0])) : "";
      for (const auto& x : items) {
        Value subj = by_attr ? getattr(x, attr, line) : x;
        bool r;
        if (a.pos.size() <= ti) {
          r = truthy(subj);
        } else {
          std::string tname = py_str(a.pos[ti]);
          if (std::find(std::begin(kTests), std::end(kTests), tname) == std::end(kTests))
            fail_at(line, "unsupported test '" + tname + "'");
          Expr te;
          te.k = EK::Test;
          te.name = tname;
          te.line = line;
          auto l0 = std::make_unique<Expr>();
          l0->k = EK::Lit;
          l0->lit = subj;
          te.a.push_back(std::move(l0));
          for (size_t k = ti + 1; k < a.pos.size(); ++k) {
            auto lk = std::make_unique<Expr>();
            lk->k = EK::Lit;
            lk->lit = a.pos[k];
            te.a.push_back(std::move(lk));
          }
          r = test(te);
        }
        if (r == want) out.push_back(x);
      }
      return Value::list(std::move(out));
    }
    if (n == "escape" || n == "e") {
      std::string o;
      for (char c : py_str(v)) {
        switch (c) {
          case '&': o += "&amp;"; break;
          case '<': o += "&lt;"; break;
          case '>': o += "&gt;"; break;
          case '"': o += "&#34;"; break;
          case '\'': o += "&#39;"; break;
          default: o += c;
        }
      }
      return Value::str(o);
    }
    if (n == "indent") {
      const Value* w = a.get(0, "width");
      const Value* first = a.get(1, "first");
      const Value* blank = a.get(2, "blank");
      std::string pad = w && w->t == VT::Str ? w->s : std::string(size_t(w ? std::max<int64_t>(0, w->as_i()) : 4), ' ');
      std::string s = py_str(v), o;
      size_t pos = 0;
      bool first_line = true;
      while (true) {
        size_t nl = s.find('\n', pos);
        std::string ln = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        bool do_pad = first_line ? (first && truthy(*first)) : (!ln.empty() || (blank && truthy(*blank)));
        if (do_pad) o += pad;
        o += ln;
        if (nl == std::string::npos) break;
        o += '\n';
        pos = nl + 1;
        first_line = false;
      }
      return Value::str(o);
    }
    if (n == "wordcount") {
      Args none;
      return Value::integer(int64_t(str_method(py_str(v), "split", none, line).l->size()));
    }
    if (n == "attr") return getattr(v, str_arg(0, "name", ""), line);
    fail_at(line, "unsupported filter '" + n + "'");
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.a[0]);
    Args a = eval_args(e, 1);
    return apply_filter(e.name, v, a, e.line);
  }

  Ctx& c_;
};

}  // namespace

// ============================================================== public

struct Template::Impl {
  std::string name;
  Body body;
};

Template::Template(std::string_view source, std::string name, Options opts) : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  auto chunks = lex_template(std::string(source), impl_->name, opts);
  TemplateParser p(chunks, impl_->name);
  impl_->body = p.parse_all();
}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const nlohmann::ordered_json& globals) const {
  std::string out;
  Ctx ctx{impl_->name, {}, &out, 0};
  auto g = std::make_shared<Dict>();
  if (!globals.is_object() && !globals.is_null()) fail("{}: render context must be a JSON object", impl_->name);
  if (globals.is_object())
    for (auto it = globals.begin(); it != globals.end(); ++it) g->set(it.key(), from_json(it.value()));
  ctx.scopes.push_back(g);
  Renderer r(ctx);
  Flow f = r.exec(impl_->body);
  if (f != Flow::Normal) fail("{}: 'break' or 'continue' outside a loop", impl_->name);
  return out;
}

}  // namespace nemo::text::jinja
