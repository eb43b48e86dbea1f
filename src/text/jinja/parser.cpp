// Jinja parser: a recursive-descent expression parser and the statement / block structure.
#include "text/jinja/parser.h"

#include <algorithm>

#include "text/jinja/filters.h"
#include "text/jinja/tests.h"

namespace nemo::text::jinja {
namespace {

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
  bool is_name(const char* s, size_t o = 0) const {
    return peek(o).k == TK::Name && peek(o).s == s;
  }
  bool is_op(const char* s, size_t o = 0) const { return peek(o).k == TK::Op && peek(o).s == s; }
  const Tok& next() {
    const Tok& t = t_[p_];
    if (p_ + 1 < t_.size()) ++p_;
    return t;
  }
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
      if (is_name("else")) {
        next();
        other = cond();
      }
      c->a.push_back(std::move(test));
      c->a.push_back(std::move(a));
      c->a.push_back(std::move(other));
      a = std::move(c);
    }
    return a;
  }
  ExprP or_() { return keyword_chain("or", EK::Or, &Parser::and_); }
  ExprP and_() { return keyword_chain("and", EK::And, &Parser::not_); }
  // `a or b or c` (likewise `and`): left-associative.
  ExprP keyword_chain(const char* kw, EK k, ExprP (Parser::*operand)()) {
    ExprP a = (this->*operand)();
    while (is_name(kw)) {
      next();
      auto n = make(k);
      n->a.push_back(std::move(a));
      n->a.push_back((this->*operand)());
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
      if (peek().k == TK::Op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" ||
                                 peek().s == ">" || peek().s == "<=" || peek().s == ">=")) {
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
    if (t.k == TK::Int) {
      next();
      return lit(Value::integer(t.i));
    }
    if (t.k == TK::Float) {
      next();
      return lit(Value::number(t.f));
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make(EK::TupleLit);
      }
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
        if (peek().k == TK::Int)
          a->name = std::to_string(next().i);
        else
          a->name = expect_name();
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
        while (is_op(".")) {
          next();
          f->name += "." + expect_name();
        }
        if (!is_filter(f->name)) err(name_, f->line, "unsupported filter '" + f->name + "'");
        f->a.push_back(std::move(n));
        if (is_op("(")) call_args(*f);
        n = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(EK::Test);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        if (peek().k == TK::Name)
          t->name = next().s;
        else if (peek().k == TK::Op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" ||
                                        peek().s == ">" || peek().s == "<=" || peek().s == ">="))
          t->name = next().s;
        else
          fail_here("expected a test name after 'is'");
        if (!is_test(t->name)) err(name_, t->line, "unsupported test '" + t->name + "'");
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
    if (!ends.empty())
      err(name_, open_line_, "missing {% " + ends.back() + " %} (block opened here)");
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
      while (p.is_op(",")) {
        p.next();
        s->targets.push_back(p.expect_name());
      }
      if (!p.is_name("in")) p.fail_here("expected 'in'");
      p.next();
      // The iterable stops before a filter `if` (no conditional expression here).
      s->e = p.or_();
      if (p.is_name("if")) {
        p.next();
        s->cond = p.expression();
      }
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
      while (p.is_op(",")) {
        p.next();
        s->targets.push_back(p.expect_name());
      }
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
          while (p.is_op(",")) {
            p.next();
            tup->a.push_back(p.expression());
          }
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
      if (!is_filter(f->name)) err(name_, f->line, "unsupported filter '" + f->name + "'");
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

Body parse_template(std::vector<Chunk>& chunks, const std::string& name) {
  return TemplateParser(chunks, name).parse_all();
}

}  // namespace nemo::text::jinja
