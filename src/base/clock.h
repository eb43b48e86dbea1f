// Monotonic wall clock in seconds, for timing and telemetry.
#pragma once
#include <chrono>

namespace nemo {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace nemo
