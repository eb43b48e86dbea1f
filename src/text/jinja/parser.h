// Jinja AST (expression and statement nodes) and the parser that builds it from lexer chunks.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace nemo::text::jinja {

enum class EK {
  Lit,
  Name,
  ListLit,
  TupleLit,
  DictLit,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Neg,
  Pos,
  Not,
  Bin,
  And,
  Or,
  Cond,
  Compare
};

struct Expr {
  EK k;
  int line = 0;
  Value lit;                             // Lit
  std::string name;                      // Name / Attr / Filter / Test / Bin op
  std::vector<std::unique_ptr<Expr>> a;  // children / positional args
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kw;  // keyword args
  std::vector<std::string> ops;                                   // Compare
  bool negated = false;                                           // Test
};
using ExprP = std::unique_ptr<Expr>;

enum class SK { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock, Body };

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // one per param (nullptr: none)
  Body body;
  int line = 0;
};

struct Stmt {
  SK k;
  int line = 0;
  std::string text;                              // Text
  ExprP e;                                       // Output / Set value / For iterable
  std::vector<std::pair<ExprP, Body>> branches;  // If (cond, body)
  Body body, else_body;                          // For / SetBlock / FilterBlock / If-else
  std::vector<std::string> targets;              // For / Set names
  std::string attr;                              // Set ns.attr
  ExprP cond;                                    // For filter
  ExprP filter;                                  // SetBlock / FilterBlock chain, on the body text
  std::unique_ptr<MacroDef> macro;
};

// Parses a whole template; throws "<name>:<line>: ..." on malformed or unsupported syntax.
// Consumes the chunks' text and tokens.
Body parse_template(std::vector<Chunk>& chunks, const std::string& name);

}  // namespace nemo::text::jinja
