// Jinja values: the Value / List / Dict model, Python-compatible printing, truthiness, equality.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nemo::text::jinja {

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
struct Ctx;  // the renderer's state, handed to native functions (renderer.cpp)
using Func = std::function<Value(Args&, Ctx&, int line)>;
struct MacroDef;  // parser.h

enum class VT : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Func, Macro };

struct Value {
  // Every member has an initialiser: the factories below name only the ones they set.
  VT t = VT::Undefined;
  bool tuple = false;  // list rendered as a Python tuple
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s{};
  std::shared_ptr<List> l{};
  std::shared_ptr<Dict> d{};
  std::shared_ptr<Func> fn{};
  const MacroDef* macro = nullptr;

  static Value none() { return {.t = VT::None}; }
  static Value boolean(bool x) { return {.t = VT::Bool, .b = x}; }
  static Value integer(int64_t x) { return {.t = VT::Int, .i = x}; }
  static Value number(double x) { return {.t = VT::Float, .f = x}; }
  static Value str(std::string x) { return {.t = VT::Str, .s = std::move(x)}; }
  static Value list(List x, bool tup = false) {
    return {.t = VT::List, .tuple = tup, .l = std::make_shared<List>(std::move(x))};
  }
  static Value dict();
  static Value func(Func f) { return {.t = VT::Func, .fn = std::make_shared<Func>(std::move(f))}; }
  bool undefined() const { return t == VT::Undefined; }
  bool is_num() const { return t == VT::Int || t == VT::Float || t == VT::Bool; }
  double as_f() const { return t == VT::Float ? f : t == VT::Int ? double(i) : double(b); }
  int64_t as_i() const { return t == VT::Int ? i : t == VT::Bool ? int64_t(b) : int64_t(f); }
};

// A Python dict (insertion ordered; small, so a vector) or a `namespace()` object.
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
      if (key == k) {
        val = std::move(v);
        return;
      }
    items.emplace_back(k, std::move(v));
  }
};

inline Value Value::dict() {
  return {.t = VT::Dict, .d = std::make_shared<Dict>()};
}

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `idx` by position, else by keyword `name`; nullptr when absent.
  const Value* get(size_t idx, std::string_view name) const {
    if (idx < pos.size()) return &pos[idx];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

// Throws nemo::Error "<template name>:<line>: <msg>".
[[noreturn]] void err(const std::string& name, int line, const std::string& msg);

// Where an operation runs (template name and line), for its error messages.
struct Site {
  const std::string& tmpl;
  int line;
  [[noreturn]] void fail(const std::string& msg) const { err(tmpl, line, msg); }
};

const char* type_name(const Value& v);  // as in error messages: "int", "namespace", ...
Value from_json(const nlohmann::ordered_json& j);

std::string py_str(const Value& v);   // Python str(v)
std::string py_repr(const Value& v);  // Python repr(v)
// Appends json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort) to `o` (indent < 0:
// none); false when v holds something JSON cannot represent.
bool py_json(const Value& v, int indent, bool sort, std::string& o);

bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);  // Python ==

}  // namespace nemo::text::jinja
