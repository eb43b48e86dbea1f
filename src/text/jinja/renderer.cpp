// Jinja renderer: evaluates the AST against a context (scopes, macros, loops, output limit).
#include "text/jinja/renderer.h"

#include <algorithm>
#include <ctime>
#include <optional>
#include <unordered_set>

#include "base/error.h"
#include "text/jinja/filters.h"
#include "text/jinja/methods.h"
#include "text/jinja/ops.h"
#include "text/jinja/table.h"
#include "text/jinja/tests.h"

namespace nemo::text::jinja {

// What native functions (globals such as range(), loop.cycle) see of the render.
struct Ctx {
  const std::string& name;
  std::vector<std::shared_ptr<Dict>> scopes;  // [0] = template globals
  std::string* out;
  int depth = 0;
};

namespace {

constexpr int kMaxDepth = 200;  // nested macro calls

enum class Flow { Normal, Break, Continue };

// True when `v` holds, at any depth, the dict `target`. Values share their lists and dicts
// (shared_ptr), and `{% set ns.x = v %}` is the one statement that stores a value into an existing
// container, so refusing it when v holds ns keeps every value acyclic: a cycle would never be
// freed (Python's collector has no counterpart here). Iterative, each container visited once.
bool holds(const Value& v, const Dict* target) {
  if (v.t != VT::Dict && v.t != VT::List) return false;  // the usual case: nothing to walk
  std::vector<const Value*> todo{&v};
  std::unordered_set<const void*> seen;
  while (!todo.empty()) {
    const Value* x = todo.back();
    todo.pop_back();
    const void* c = x->t == VT::Dict   ? static_cast<const void*>(x->d.get())
                    : x->t == VT::List ? static_cast<const void*>(x->l.get())
                                       : nullptr;
    if (!c) continue;
    if (c == target) return true;
    if (!seen.insert(c).second) continue;
    if (x->t == VT::Dict)
      for (const auto& [k, y] : x->d->items) todo.push_back(&y);
    else
      for (const auto& y : *x->l) todo.push_back(&y);
  }
  return false;
}

// ------------------------------------------------------------------- globals

using Global = Value (*)(Args&, Ctx&, int line);

// dict(mapping..., key=value...)
Value global_dict(Args& a, Ctx&, int) {
  Value v = Value::dict();
  for (const auto& x : a.pos)
    if (x.t == VT::Dict)
      for (const auto& [k, y] : x.d->items) v.d->set(k, y);
  for (auto& [k, x] : a.kw) v.d->set(k, x);
  return v;
}

// namespace(...): a dict whose attributes `{% set ns.x = ... %}` may assign.
Value global_namespace(Args& a, Ctx& c, int line) {
  Value v = global_dict(a, c, line);
  v.d->is_namespace = true;
  return v;
}

Value global_range(Args& a, Ctx& c, int line) {
  int64_t start = 0, stop = 0, step = 1;
  for (const auto& x : a.pos)
    if (x.t != VT::Int && x.t != VT::Bool) err(c.name, line, "range() arguments must be integers");
  if (a.pos.size() == 1)
    stop = a.pos[0].as_i();
  else if (a.pos.size() >= 2) {
    start = a.pos[0].as_i();
    stop = a.pos[1].as_i();
  }
  if (a.pos.size() == 3) step = a.pos[2].as_i();
  if (step == 0) err(c.name, line, "range() step must not be zero");
  List l;
  for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) {
    if (l.size() >= kMaxListItems) err(c.name, line, "range() too large");
    l.push_back(Value::integer(v));
  }
  return Value::list(std::move(l));
}

Value global_raise_exception(Args& a, Ctx& c, int line) {
  err(c.name, line,
      "template raised an exception: " + (a.pos.empty() ? std::string() : py_str(a.pos[0])));
}

Value global_strftime_now(Args& a, Ctx&, int) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[256];
  std::string f = a.pos.empty() ? "%Y-%m-%d" : py_str(a.pos[0]);
  size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
  return Value::str(std::string(buf, n));
}

// Names a template can use without defining them (a context variable of the same name wins).
constexpr Named<Global> kGlobals[] = {
    {"dict", global_dict},
    {"namespace", global_namespace},
    {"raise_exception", global_raise_exception},
    {"range", global_range},
    {"strftime_now", global_strftime_now},
};
static_assert(strictly_sorted(kGlobals));

// ------------------------------------------------------------------- renderer

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
      case SK::Text:
        emit(s.text, s.line);
        return Flow::Normal;
      case SK::Output:
        emit(py_str(eval(*s.e)), s.line);
        return Flow::Normal;
      case SK::Body:
        return exec(s.body);
      case SK::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec(body);
        return exec(s.else_body);
      case SK::For:
        return exec_for(s);
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
        c_.scopes.back()->set(s.macro->name, Value{.t = VT::Macro, .macro = s.macro.get()});
        return Flow::Normal;
      }
      case SK::Break:
        return Flow::Break;
      case SK::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& msg) const { err(c_.name, line, msg); }
  Site at(int line) const { return {c_.name, line}; }

  void emit(const std::string& s, int line) {
    if (c_.out->size() + s.size() > kMaxOutput)
      fail_at(line, fmt::format("output exceeds {} MiB", kMaxOutput >> 20));
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
        fail_at(s.line, "cannot set attribute '" + s.attr + "' on " + type_name(ns) + " '" +
                            s.targets[0] + "' (only namespace objects)");
      if (holds(v, ns.d.get()))
        fail_at(s.line, "cannot set attribute '" + s.attr + "' of namespace '" + s.targets[0] +
                            "' to a value that holds the namespace itself");
      ns.d->set(s.attr, std::move(v));
      return;
    }
    if (s.targets.size() == 1) {
      c_.scopes.back()->set(s.targets[0], std::move(v));
      return;
    }
    List items = iterate(v, at(s.line));
    if (items.size() != s.targets.size())
      fail_at(s.line,
              fmt::format("cannot unpack {} values into {} names", items.size(), s.targets.size()));
    for (size_t k = 0; k < items.size(); ++k) c_.scopes.back()->set(s.targets[k], items[k]);
  }

  Value lookup(const std::string& n) const {
    for (size_t k = c_.scopes.size(); k-- > 0;)
      if (const Value* v = c_.scopes[k]->find(n)) return *v;
    return Value();
  }

  Flow exec_for(const Stmt& s) {
    Value seq = eval(*s.e);
    List items = iterate(seq, at(s.line));
    auto bind = [&](Dict& scope, const Value& item) {
      if (s.targets.size() == 1) {
        scope.set(s.targets[0], item);
        return;
      }
      List parts = iterate(item, at(s.line));
      if (parts.size() != s.targets.size())
        fail_at(s.line, fmt::format("cannot unpack {} values into {} loop variables", parts.size(),
                                    s.targets.size()));
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
    if (items.empty()) {
      exec(s.else_body);  // a break / continue in it goes no further
      return Flow::Normal;
    }
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
      case EK::Lit:
        return e.lit;
      case EK::Name: {
        Value v = lookup(e.name);
        if (v.undefined()) return global(e.name);
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
      case EK::Attr:
        return getattr(eval(*e.a[0]), e.name, at(e.line));
      case EK::Item:
        return getitem(eval(*e.a[0]), eval(*e.a[1]), at(e.line));
      case EK::Slice:
        return slice_of(e);
      case EK::Call:
        return call(e);
      case EK::Filter: {
        Value v = eval(*e.a[0]);
        Args a = eval_args(e, 1);
        return apply_filter(e.name, v, a, at(e.line));
      }
      case EK::Test: {
        Value v = eval(*e.a[0]);
        Args a = eval_args(e, 1);
        bool r = apply_test(e.name, v, a, at(e.line));
        return Value::boolean(e.negated ? !r : r);
      }
      case EK::Neg:
      case EK::Pos: {
        Value v = eval(*e.a[0]);
        if (!v.is_num())
          fail_at(e.line, std::string("bad operand type for unary ") +
                              (e.k == EK::Neg ? "-" : "+") + ": " + type_name(v));
        if (e.k == EK::Pos) return v.t == VT::Bool ? Value::integer(v.b) : v;
        return v.t == VT::Float ? Value::number(-v.f) : Value::integer(-v.as_i());
      }
      case EK::Not:
        return Value::boolean(!truthy(eval(*e.a[0])));
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
          if (!compare(e.ops[k], left, right, at(e.line))) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case EK::Bin:
        return binop(e.name, eval(*e.a[0]), eval(*e.a[1]), at(e.line));
    }
    return Value();
  }

  Value global(const std::string& n) const {
    const auto* g = find_named(kGlobals, n);
    return g ? Value::func(g->fn) : Value();
  }

  Value slice_of(const Expr& e) {
    Value obj = eval(*e.a[0]);
    auto part = [&](int k) -> std::optional<int64_t> {  // absent or None: nullopt
      if (!e.a[k]) return std::nullopt;
      Value v = eval(*e.a[k]);
      if (v.t == VT::None) return std::nullopt;
      if (v.t != VT::Int && v.t != VT::Bool) fail_at(e.line, "slice indices must be integers");
      return v.as_i();
    };
    std::optional<int64_t> start = part(1), stop = part(2), step = part(3);
    return slice(obj, start, stop, step, at(e.line));
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
      if (obj.t == VT::Str) return call_str_method(callee.name, obj, a, at(e.line));
      if (obj.t == VT::Dict && !obj.d->is_namespace && is_dict_method(callee.name))
        return call_dict_method(callee.name, obj, a, at(e.line));
      Value fnv = getattr(obj, callee.name, at(e.line));
      return invoke(fnv, a, e.line, callee.name);
    }
    Value fnv = eval(callee);
    Args a = eval_args(e, 1);
    return invoke(fnv, a, e.line, callee.k == EK::Name ? callee.name : "expression");
  }

  Value invoke(const Value& fnv, Args& a, int line, const std::string& what) {
    if (fnv.t == VT::Func) return (*fnv.fn)(a, c_, line);
    if (fnv.t == VT::Macro) return call_macro(*fnv.macro, a, line);
    if (fnv.t == VT::Undefined)
      fail_at(line, "'" + what + "' is undefined or not a supported function");
    fail_at(line, std::string("'") + type_name(fnv) + "' object is not callable");
  }

  Value call_macro(const MacroDef& m, Args& a, int line) {
    if (c_.depth >= kMaxDepth) fail_at(line, "macro recursion too deep");
    auto scope = std::make_shared<Dict>();
    if (a.pos.size() > m.params.size())
      fail_at(line,
              "macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments");
    for (size_t k = 0; k < m.params.size(); ++k) {
      const Value* v = a.get(k, m.params[k]);
      if (v)
        scope->set(m.params[k], *v);
      else if (m.defaults[k])
        scope->set(m.params[k], eval(*m.defaults[k]));
      else
        scope->set(m.params[k], Value());
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

  Ctx& c_;
};

}  // namespace

std::string render(const Body& body, const std::string& name,
                   const nlohmann::ordered_json& globals) {
  std::string out;
  Ctx ctx{name, {}, &out, 0};
  auto g = std::make_shared<Dict>();
  if (!globals.is_object() && !globals.is_null())
    fail("{}: render context must be a JSON object", name);
  if (globals.is_object())
    for (auto it = globals.begin(); it != globals.end(); ++it)
      g->set(it.key(), from_json(it.value()));
  ctx.scopes.push_back(g);
  Renderer r(ctx);
  Flow f = r.exec(body);
  if (f != Flow::Normal) fail("{}: 'break' or 'continue' outside a loop", name);
  return out;
}

}  // namespace nemo::text::jinja
