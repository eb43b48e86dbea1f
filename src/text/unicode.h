// UTF-8 helpers and Unicode NFC normalisation for the tokenizer and detokenizer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nemo::text {

inline constexpr char32_t kInvalidCp = 0xFFFFFFFF;

// Decodes one code point at s[i]. Returns the number of bytes consumed (>= 1).
// On an ill-formed sequence sets cp = kInvalidCp and returns the length of the
// maximal ill-formed subpart (what a WHATWG/Rust lossy decoder replaces by one U+FFFD).
size_t utf8_next(std::string_view s, size_t i, char32_t& cp);

void utf8_append(std::string& out, char32_t cp);
bool utf8_valid(std::string_view s);
// Replaces every maximal ill-formed subpart with U+FFFD (same as Rust's from_utf8_lossy
// and JS TextDecoder).
std::string utf8_lossy(std::string_view s);
// Length of a trailing, so far well-formed but incomplete, multi-byte sequence (0..3):
// bytes a streaming decoder must hold back until more input arrives.
size_t utf8_incomplete_tail(std::string_view s);

// Canonical composition (NFC). Ill-formed bytes pass through unchanged.
std::string nfc(std::string_view s);
// Canonical decomposition (NFD). Ill-formed bytes pass through unchanged.
std::string nfd(std::string_view s);
const char* unicode_version();

// Unicode White_Space (what Oniguruma's \s matches in the Rust tokenizers crate).
bool is_white_space(char32_t cp);

}  // namespace nemo::text
