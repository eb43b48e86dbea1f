// Thin RAII wrapper over PCRE2 (UTF + UCP + JIT) with Oniguruma-compatible `\s`.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace nemo::text {

class Regex {
 public:
  // Throws nemo::Error (naming `what`) when the pattern does not compile.
  Regex(std::string_view pattern, const std::string& what);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Per-thread/per-call matching state (match data + JIT stack).
  class Scratch {
   public:
    explicit Scratch(const Regex& re);
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    friend class Regex;
    void* md_ = nullptr;
    void* ctx_ = nullptr;
    void* stack_ = nullptr;
  };

  // Finds the first match in subject[start..]. Returns false when none (or on a matcher
  // error, which is treated as "no further match" so callers never fail mid-encode).
  bool find(std::string_view subject, size_t start, Scratch& s, size_t& mb, size_t& me) const;

 private:
  void* code_ = nullptr;
};

// Rewrites `\s`/`\S` into explicit Unicode White_Space classes (Oniguruma semantics).
std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace nemo::text
