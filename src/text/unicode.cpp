#include "text/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace nemo::text {
namespace {

struct CccRange {
  char32_t start, end;
  uint8_t ccc;
};
struct DecompEntry {
  char32_t cp;
  uint16_t offset;
  uint8_t len;
};
struct ComposeEntry {
  uint64_t key;  // first << 21 | second
  char32_t composite;
};
struct CpRange {
  char32_t start, end;
};

#include "text/unicode_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

uint8_t ccc_of(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kCcc), std::end(kCcc), cp,
                             [](char32_t c, const CccRange& r) { return c < r.start; });
  if (it == std::begin(kCcc)) return 0;
  --it;
  return cp <= it->end ? it->ccc : 0;
}

const DecompEntry* decomp_of(char32_t cp) {
  auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                             [](const DecompEntry& e, char32_t c) { return e.cp < c; });
  return (it != std::end(kDecomp) && it->cp == cp) ? it : nullptr;
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  uint64_t key = (uint64_t(a) << 21) | b;
  auto it = std::lower_bound(std::begin(kCompose), std::end(kCompose), key,
                             [](const ComposeEntry& e, uint64_t k) { return e.key < k; });
  return (it != std::end(kCompose) && it->key == key) ? it->composite : 0;
}

// Bitset of code points that are not "stable starters" (see generator), built once.
class UnsafeSet {
 public:
  UnsafeSet() : bits_(0x110000 / 64, 0) {
    for (const auto& r : kNfcUnsafe)
      for (char32_t c = r.start; c <= r.end; ++c) bits_[c >> 6] |= uint64_t(1) << (c & 63);
  }
  bool test(char32_t c) const { return (bits_[c >> 6] >> (c & 63)) & 1; }

 private:
  std::vector<uint64_t> bits_;
};

const UnsafeSet& unsafe_set() {
  static const UnsafeSet s;  // immutable table, built on first use
  return s;
}

void decompose_into(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const DecompEntry* d = decomp_of(cp)) {
    out.insert(out.end(), kDecompPool + d->offset, kDecompPool + d->offset + d->len);
    return;
  }
  out.push_back(cp);
}

// Stable sort of each run of non-starters by combining class.
void canonical_order(std::vector<char32_t>& v) {
  size_t i = 0;
  while (i < v.size()) {
    if (ccc_of(v[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < v.size() && ccc_of(v[j]) != 0) ++j;
    std::stable_sort(v.begin() + i, v.begin() + j,
                     [](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
}

void compose(std::vector<char32_t>& v) {
  size_t starter = SIZE_MAX, out = 0;
  int last_ccc = 0;  // class of the last char kept after the current starter
  for (size_t i = 0; i < v.size(); ++i) {
    char32_t c = v[i];
    int cc = ccc_of(c);
    // Not blocked: adjacent to the starter, or everything in between has a lower class.
    if (starter != SIZE_MAX && (out == starter + 1 || (last_ccc != 0 && last_ccc < cc))) {
      if (char32_t comp = compose_pair(v[starter], c)) {
        v[starter] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = out;
      last_ccc = 0;
    } else {
      last_ccc = cc;
    }
    v[out++] = c;
  }
  v.resize(out);
}

// Normalises a region that holds only well-formed code points.
void normalize_region(std::string_view s, bool do_compose, std::string& out,
                      std::vector<char32_t>& buf) {
  buf.clear();
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i += utf8_next(s, i, cp);
    decompose_into(cp, buf);
  }
  canonical_order(buf);
  if (do_compose) compose(buf);
  for (char32_t c : buf) utf8_append(out, c);
}

std::string normalize(std::string_view s, bool do_compose) {
  const UnsafeSet& unsafe = unsafe_set();
  // Fast path: nothing to change.
  size_t i = 0;
  size_t first_unsafe = SIZE_MAX;
  while (i < s.size()) {
    unsigned char b = s[i];
    if (b < 0x80) { ++i; continue; }
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (cp != kInvalidCp && unsafe.test(cp)) { first_unsafe = i; break; }
    i += n;
  }
  if (first_unsafe == SIZE_MAX) return std::string(s);

  std::string out;
  out.reserve(s.size() + 16);
  std::vector<char32_t> buf;
  // Walk code points, tracking the start of the current region (last stable starter).
  size_t region = 0;  // start of pending region in s
  bool region_unsafe = false;
  i = 0;
  auto flush = [&](size_t end) {
    if (region_unsafe)
      normalize_region(s.substr(region, end - region), do_compose, out, buf);
    else
      out.append(s.substr(region, end - region));
    region = end;
    region_unsafe = false;
  };
  while (i < s.size()) {
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (cp == kInvalidCp) {  // ill-formed bytes: a hard boundary, copied verbatim
      flush(i);
      out.append(s.substr(i, n));
      i += n;
      region = i;
      continue;
    }
    if (unsafe.test(cp)) {
      region_unsafe = true;
    } else {
      flush(i);  // a stable starter begins a new region
    }
    i += n;
  }
  flush(s.size());
  return out;
}

}  // namespace

size_t utf8_next(std::string_view s, size_t i, char32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  unsigned char b0 = p[i];
  if (b0 < 0x80) { cp = b0; return 1; }
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) { len = 2; cp = b0 & 0x1F; }
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3; cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4; cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else { cp = kInvalidCp; return 1; }
  for (int k = 1; k < len; ++k) {
    if (i + k >= n) { cp = kInvalidCp; return k; }
    unsigned char b = p[i + k];
    if (b < lo || b > hi) { cp = kInvalidCp; return k; }
    lo = 0x80; hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return len;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) out.push_back(char(cp));
  else if (cp < 0x800) { out.push_back(char(0xC0 | (cp >> 6))); out.push_back(char(0x80 | (cp & 0x3F))); }
  else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) { ++i; continue; }
    char32_t cp;
    i += utf8_next(s, i, cp);
    if (cp == kInvalidCp) return false;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  if (utf8_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (cp == kInvalidCp) out.append("\xEF\xBF\xBD");
    else out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is cut short but valid so far.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char b = s[n - back];
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    char32_t cp;
    size_t used = utf8_next(s, n - back, cp);
    // Incomplete iff the decoder ran out of input (consumed every remaining byte, failed).
    if (cp == kInvalidCp && used == back && b >= 0xC2 && b <= 0xF4) return back;
    return 0;
  }
  return 0;
}

std::string nfc(std::string_view s) { return normalize(s, true); }
std::string nfd(std::string_view s) { return normalize(s, false); }
const char* unicode_version() { return NEMO_UNICODE_VERSION; }

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace nemo::text
