// Python str semantics on UTF-8 text: code points, whitespace, strip, split, replace, case.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nemo::text::jinja {

size_t cp_len(const std::string& s);                 // len(s): code points
std::vector<std::string> cps(const std::string& s);  // list(s): one string per code point
bool py_space(char32_t c);                           // str.isspace()

// s.strip(chars) / lstrip / rstrip; chars == nullptr strips whitespace.
std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars);
// s.split(sep, maxsplit) and s.rsplit(sep, maxsplit) with a non-empty sep (maxsplit < 0: no limit;
// py_rsplit wants maxsplit >= 0, where it differs from py_split).
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::string& sep, int64_t maxsplit);
// s.split(None, maxsplit): runs of whitespace separate, none at either end.
std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit);
// s.replace(from, to, count) (count < 0: all).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count);

// Case mapping is ASCII-only (the templates this engine serves need no more).
std::string ascii_upper(const std::string& s);
std::string ascii_lower(const std::string& s);
std::string title(const std::string& s);
std::string capitalize(const std::string& s);

}  // namespace nemo::text::jinja
