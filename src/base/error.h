// Errors: one exception type for load-time / request-time failures. Hot loops never throw.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nemo {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define NEMO_CHECK(cond, ...)          \
  do {                                 \
    if (!(cond)) ::nemo::fail(__VA_ARGS__); \
  } while (0)

}  // namespace nemo
