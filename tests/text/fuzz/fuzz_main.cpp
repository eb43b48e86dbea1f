// libFuzzer entry point; NEMO_FUZZ_TARGET names a function in fuzz_targets.h.
#include <cstddef>
#include <cstdint>

#include "../fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nemo::text::fuzz::NEMO_FUZZ_TARGET(data, size);
  return 0;
}
