// libFuzzer entry point: NEMO_FUZZ_HEADER is a fuzz_targets.h, NEMO_FUZZ_TARGET a function in it
// (tests/fuzz/fuzz.cmake defines both per binary).
#include <cstddef>
#include <cstdint>

#include NEMO_FUZZ_HEADER

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)NEMO_FUZZ_TARGET(data, size);
  return 0;
}
