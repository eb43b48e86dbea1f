// Python str semantics on UTF-8 text (see strings.h).
#include "text/jinja/strings.h"

#include <cctype>

#include "text/unicode.h"

namespace nemo::text::jinja {

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
  if (left)
    while (b < e && is_strip(v[b])) ++b;
  if (right)
    while (e > b && is_strip(v[e - 1])) --e;
  std::string o;
  for (size_t k = b; k < e; ++k) o += v[k];
  return o;
}

std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t pos = 0;
  int64_t cnt = 0;
  while (maxsplit < 0 || cnt < maxsplit) {
    size_t f = s.find(sep, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep.size();
    ++cnt;
  }
  out.push_back(s.substr(pos));
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> parts;  // right to left
  size_t end = s.size();
  int64_t cnt = 0;
  while (cnt < maxsplit) {
    size_t f = end >= sep.size() ? s.rfind(sep, end - sep.size()) : std::string::npos;
    if (f == std::string::npos) break;
    parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
    end = f;
    ++cnt;
  }
  parts.push_back(s.substr(0, end));
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  auto chars = cps(s);
  std::string cur;
  bool in = false;
  int64_t cnt = 0;
  for (size_t k = 0; k < chars.size(); ++k) {
    char32_t cp;
    utf8_next(chars[k], 0, cp);
    bool sp = cp != kInvalidCp && py_space(cp);
    if (sp && in && (maxsplit < 0 || cnt < maxsplit)) {
      out.push_back(cur);
      cur.clear();
      in = false;
      ++cnt;
    } else if (!sp || in) {
      if (!in && maxsplit >= 0 && cnt >= maxsplit) {
        // The rest is the last part, less trailing whitespace.
        for (size_t r = k; r < chars.size(); ++r) cur += chars[r];
        cur = py_strip(cur, false, true, nullptr);
        in = true;
        break;
      }
      cur += chars[k];
      in = true;
    }
  }
  if (in) out.push_back(cur);
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
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

std::string ascii_upper(const std::string& s) {
  std::string o = s;
  for (auto& c : o) c = char(std::toupper(static_cast<unsigned char>(c)));
  return o;
}

std::string ascii_lower(const std::string& s) {
  std::string o = s;
  for (auto& c : o) c = char(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string title(const std::string& s) {
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

std::string capitalize(const std::string& s) {
  std::string o = s;
  for (size_t k = 0; k < o.size(); ++k)
    o[k] = k == 0 ? char(std::toupper(static_cast<unsigned char>(o[k])))
                  : char(std::tolower(static_cast<unsigned char>(o[k])));
  return o;
}

}  // namespace nemo::text::jinja
