// Fuzz entry points for the io layer, shared by the gtest driver (tests/io/test_fuzz.cpp) and the
// libFuzzer binaries (tests/fuzz/). Each checks properties of its input and aborts on a
// violation; what it returns lets the gtest driver assert that the inputs exercised the code.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../support/fuzz_check.h"

namespace nemo::io::fuzz {
using nemo::fuzz::Outcome;

// Arbitrary bytes as a .safetensors file: it loads or throws nemo::Error naming the file; a loaded
// file's tensors have dtype x shape = their byte count and tile the data section exactly.
Outcome safetensors_file(const uint8_t* data, size_t size);
// Arbitrary text as config.json / hf_quant_config.json: the model, quantization and drafter
// config parsers accept it or throw nemo::Error naming the file (the drafter parser never
// throws); an accepted model config survives model_config_to_json unchanged. Accepted if the
// model config was.
Outcome config_json(const uint8_t* data, size_t size);
}  // namespace nemo::io::fuzz
