// Python semantics of Jinja operators on Values (see ops.h).
#include "text/jinja/ops.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "text/jinja/strings.h"

namespace nemo::text::jinja {

List iterate(const Value& v, const Site& at) {
  switch (v.t) {
    case VT::Undefined:
      return {};
    case VT::List:
      return *v.l;
    case VT::Dict: {
      if (v.d->is_namespace) at.fail("namespace object is not iterable");
      List out;
      for (const auto& [k, x] : v.d->items) out.push_back(Value::str(k));
      return out;
    }
    case VT::Str: {
      List out;
      for (auto& c : cps(v.s)) out.push_back(Value::str(c));
      return out;
    }
    default:
      at.fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

Value getattr(const Value& obj, const std::string& n, const Site& at) {
  if (obj.t == VT::Undefined) at.fail("'" + n + "' of an undefined value");
  if (obj.t == VT::Dict) {
    if (const Value* v = obj.d->find(n)) return *v;
    return Value();
  }
  if (obj.t == VT::List && !n.empty() && std::isdigit(static_cast<unsigned char>(n[0]))) {
    int64_t i = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), i);
    // Past int64 (std::stoll would throw): no such index, so undefined.
    if (ec != std::errc() || end != n.data() + n.size()) return Value();
    return getitem(obj, Value::integer(i), at);
  }
  return Value();  // attributes of other types are undefined (methods: see methods.h)
}

Value getitem(const Value& obj, const Value& key, const Site& at) {
  if (obj.t == VT::Undefined) at.fail("subscript of an undefined value");
  if (obj.t == VT::Dict) {
    if (key.t != VT::Str) return Value();
    if (const Value* v = obj.d->find(key.s)) return *v;
    return Value();
  }
  if (obj.t == VT::List || obj.t == VT::Str) {
    if (key.t != VT::Int && key.t != VT::Bool) {
      if (key.t == VT::Str) return Value();
      at.fail(std::string("indices must be integers, not ") + type_name(key));
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
  if (obj.t == VT::None) at.fail("'NoneType' object is not subscriptable");
  return Value();
}

Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step_or_none, const Site& at) {
  int64_t step = step_or_none.value_or(1);
  if (step == 0) at.fail("slice step cannot be zero");
  std::vector<std::string> chars;
  bool is_str = obj.t == VT::Str;
  int64_t n;
  if (obj.t == VT::List)
    n = int64_t(obj.l->size());
  else if (is_str) {
    chars = cps(obj.s);
    n = int64_t(chars.size());
  } else if (obj.t == VT::Undefined)
    at.fail("slice of an undefined value");
  else
    at.fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
  auto norm = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t a = norm(start, step > 0 ? 0 : n - 1), b = norm(stop, step > 0 ? n : -1);
  List out;
  std::string sout;
  for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
    if (is_str)
      sout += chars[i];
    else
      out.push_back((*obj.l)[i]);
  }
  return is_str ? Value::str(sout) : Value::list(std::move(out));
}

bool compare(const std::string& op, const Value& a, const Value& b, const Site& at) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "notin") {
    bool r;
    if (b.t == VT::Str) {
      if (a.t != VT::Str)
        at.fail(std::string("'in <string>' requires string as left operand, not ") + type_name(a));
      r = b.s.find(a.s) != std::string::npos;
    } else if (b.t == VT::List) {
      r = std::any_of(b.l->begin(), b.l->end(), [&](const Value& x) { return equal(a, x); });
    } else if (b.t == VT::Dict && !b.d->is_namespace) {
      r = a.t == VT::Str && b.d->find(a.s);
    } else if (b.t == VT::Undefined) {
      r = false;
    } else {
      at.fail(std::string("argument of type '") + type_name(b) + "' is not iterable");
    }
    return op == "in" ? r : !r;
  }
  int c;
  if (a.is_num() && b.is_num()) {
    double x = a.as_f(), y = b.as_f();
    if (a.t != VT::Float && b.t != VT::Float)
      c = a.as_i() < b.as_i() ? -1 : a.as_i() > b.as_i();
    else
      c = x < y ? -1 : x > y ? 1 : 0;
  } else if (a.t == VT::Str && b.t == VT::Str) {
    c = a.s.compare(b.s);  // UTF-8 byte order = code point order
    c = c < 0 ? -1 : c > 0;
  } else {
    at.fail("'" + op + "' not supported between '" + type_name(a) + "' and '" + type_name(b) + "'");
  }
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

Value binop(const std::string& op, const Value& a, const Value& b, const Site& at) {
  if (op == "~") {
    std::string r = py_str(a) + py_str(b);
    if (r.size() > kMaxOutput) at.fail("string too large");
    return Value::str(std::move(r));
  }
  auto bad = [&]() -> Value {
    at.fail("unsupported operand types for " + op + ": '" + type_name(a) + "' and '" +
            type_name(b) + "'");
  };
  if (a.undefined() || b.undefined()) bad();
  if (op == "+") {
    if (a.t == VT::Str && b.t == VT::Str) {
      if (a.s.size() + b.s.size() > kMaxOutput) at.fail("string too large");
      return Value::str(a.s + b.s);
    }
    if (a.t == VT::List && b.t == VT::List) {
      if (a.l->size() + b.l->size() > kMaxListItems) at.fail("list too large");
      List l = *a.l;
      l.insert(l.end(), b.l->begin(), b.l->end());
      return Value::list(std::move(l), a.tuple && b.tuple);
    }
  }
  if (op == "*") {
    const Value* seq = a.t == VT::Str || a.t == VT::List     ? &a
                       : (b.t == VT::Str || b.t == VT::List) ? &b
                                                             : nullptr;
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && (cnt->t == VT::Int || cnt->t == VT::Bool)) {
      int64_t n = std::max<int64_t>(0, cnt->as_i());
      size_t unit = seq->t == VT::Str ? seq->s.size() : seq->l->size();
      const size_t limit = seq->t == VT::Str ? kMaxOutput : kMaxListItems;
      if (unit && uint64_t(n) > limit / unit) at.fail("sequence repetition too large");
      if (seq->t == VT::Str) {
        // By doubling: a few large copies, not n small appends (n may be ~10^8).
        const size_t total = size_t(n) * unit;
        std::string o;
        o.reserve(total);
        if (total) o = seq->s;
        while (o.size() < total) o.append(o, 0, std::min(o.size(), total - o.size()));
        return Value::str(std::move(o));
      }
      List l;
      for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq->l->begin(), seq->l->end());
      return Value::list(std::move(l));
    }
  }
  if (!a.is_num() || !b.is_num()) bad();
  bool fl = a.t == VT::Float || b.t == VT::Float;
  if (op == "/") {
    if (b.as_f() == 0) at.fail("division by zero");
    return Value::number(a.as_f() / b.as_f());
  }
  if (op == "**") {
    if (!fl && b.as_i() >= 0) {
      double r = std::pow(double(a.as_i()), double(b.as_i()));
      if (std::fabs(r) > 9.2e18) at.fail("integer power too large");
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
    if (y == 0) at.fail("division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  int64_t x = a.as_i(), y = b.as_i(), r;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) at.fail("integer overflow");
    return Value::integer(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) at.fail("integer overflow");
    return Value::integer(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) at.fail("integer overflow");
    return Value::integer(r);
  }
  if (y == 0) at.fail("integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) at.fail("integer overflow");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    m += y;
    --q;
  }
  return Value::integer(op == "//" ? q : m);
}

}  // namespace nemo::text::jinja
