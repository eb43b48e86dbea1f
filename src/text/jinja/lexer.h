// Jinja lexer: splits a template into text / expression / statement chunks (with whitespace
// control) and expressions into tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/jinja.h"

namespace nemo::text::jinja {

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

// Applies Jinja's newline normalisation and whitespace control (`-`, `+`, trim_blocks,
// lstrip_blocks); `{% raw %}` bodies come back as text.
std::vector<Chunk> lex_template(std::string src, const std::string& name, const Options& opt);

}  // namespace nemo::text::jinja
