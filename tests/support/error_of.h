// Test helper: the message of the nemo::Error `fn` throws, or "" when it returns.
#pragma once
#include <functional>
#include <string>

#include "base/error.h"

namespace nemo::test {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nemo::test
