#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "base/error.h"

namespace nemo::text {
namespace {
constexpr std::string_view kWs =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
}

std::string oniguruma_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's') {
        if (in_class) out.append(kWs);
        else out.append("[").append(kWs).append("]");
        ++i;
        continue;
      }
      if (n == 'S' && !in_class) {
        out.append("[^").append(kWs).append("]");
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(n);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A leading ']' or '^]' is literal inside a class.
      if (i + 1 < p.size() && p[i + 1] == '^') { out.push_back('^'); ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out.push_back(']'); ++i; }
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      size_t e = p.find(":]", i + 2);
      if (e != std::string_view::npos) {
        out.append(p.substr(i, e + 2 - i));
        i = e + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& what) {
  std::string pat = oniguruma_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: regex does not compile at offset {}: {} (pattern: {})", what, off,
         reinterpret_cast<const char*>(msg), std::string(pattern));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  code_ = code;
}

Regex::Regex(Regex&& o) noexcept : code_(o.code_) { o.code_ = nullptr; }
Regex& Regex::operator=(Regex&& o) noexcept {
  if (this != &o) {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
    code_ = o.code_;
    o.code_ = nullptr;
  }
  return *this;
}
Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Scratch::Scratch(const Regex& re) {
  md_ = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re.code_), nullptr);
  auto* ctx = pcre2_match_context_create(nullptr);
  // Long whitespace runs backtrack deeply under `\s+(?!\S)`: give the JIT room.
  auto* st = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  if (ctx && st) pcre2_jit_stack_assign(ctx, nullptr, st);
  ctx_ = ctx;
  stack_ = st;
}
Regex::Scratch::~Scratch() {
  if (md_) pcre2_match_data_free(static_cast<pcre2_match_data*>(md_));
  if (ctx_) pcre2_match_context_free(static_cast<pcre2_match_context*>(ctx_));
  if (stack_) pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(stack_));
}

bool Regex::find(std::string_view subject, size_t start, Scratch& s, size_t& mb,
                 size_t& me) const {
  auto* md = static_cast<pcre2_match_data*>(s.md_);
  if (!md) return false;
  int rc = pcre2_match(static_cast<pcre2_code*>(code_),
                       reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start, 0, md,
                       static_cast<pcre2_match_context*>(s.ctx_));
  if (rc < 0) return false;
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  mb = ov[0];
  me = ov[1];
  return true;
}

}  // namespace nemo::text
