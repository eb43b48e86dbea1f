// Jinja lexer (see lexer.h).
#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "text/jinja/value.h"
#include "text/unicode.h"

namespace nemo::text::jinja {
namespace {

std::string unescape(std::string_view s, const std::string& name, int line) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      o += s[i];
      continue;
    }
    char c = s[++i];
    auto hex = [&](int n) -> char32_t {
      if (i + n >= s.size() + 0 && i + n > s.size() - 1 + 1)
        err(name, line, "truncated escape in string literal");
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i + 1 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])))
          err(name, line, "bad escape in string literal");
        char h = s[++i];
        v = v * 16 +
            (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (c) {
      case 'n':
        o += '\n';
        break;
      case 't':
        o += '\t';
        break;
      case 'r':
        o += '\r';
        break;
      case '\\':
        o += '\\';
        break;
      case '\'':
        o += '\'';
        break;
      case '"':
        o += '"';
        break;
      case 'a':
        o += '\a';
        break;
      case 'b':
        o += '\b';
        break;
      case 'f':
        o += '\f';
        break;
      case 'v':
        o += '\v';
        break;
      case '\n':
        break;
      case 'x':
        utf8_append(o, hex(2));
        break;
      case 'u':
        utf8_append(o, hex(4));
        break;
      case 'U':
        utf8_append(o, hex(8));
        break;
      case 'N':
        err(name, line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          char32_t v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + (s[++i] - '0');
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
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({TK::Name, std::string(src.substr(i, j - i)), 0, 0, line});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool flt = false;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      if (j + 1 < src.size() && src[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
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
      if (flt)
        t.f = std::strtod(num.c_str(), nullptr);
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
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[",
                                "]",  "{",  "}",  ",",  ".",  ":",  "|", "~", "+",
                                "-",  "*",  "/",  "%",  "=",  "<",  ">"};
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

}  // namespace

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
        if (c == '\\') {
          ++k;
          continue;
        }
        if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        continue;
      }
      if (c == closer[0] && src[k + 1] == closer[1]) break;
    }
    if (k + 1 >= src.size())
      err(name, tag_line, kind == '{' ? "unterminated '{{'" : "unterminated '{%'");
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
            if (strip_next)
              raw.erase(0, raw.find_first_not_of(" \t\n") == std::string::npos
                               ? raw.size()
                               : raw.find_first_not_of(" \t\n"));
            else if (trim_next && !raw.empty() && raw[0] == '\n')
              raw.erase(0, 1);
            if (src[q + 2] == '-')
              while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back())))
                raw.pop_back();
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

}  // namespace nemo::text::jinja
