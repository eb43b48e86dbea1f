// Shared by the fuzz targets (tests/io/fuzz_targets.cpp, tests/text/fuzz_targets.cpp): what one
// input came to, and the assertion of a property (a violation says which, then aborts: libFuzzer
// saves the input as a crash, the gtest drivers die with the message).
#pragma once
#include <cstdio>
#include <cstdlib>

namespace nemo::fuzz {
// Accepted: the input was taken (what that means is the target's: loaded, rendered, held a tool
// call); Rejected: refused with a nemo::Error, a clean message.
enum class Outcome { Accepted, Rejected };
}  // namespace nemo::fuzz

#define FUZZ_CHECK(c)                                                                       \
  do {                                                                                      \
    if (!(c)) {                                                                             \
      std::fprintf(stderr, "fuzz property violated: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)
