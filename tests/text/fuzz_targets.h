// Fuzz entry points shared by the gtest random driver and the libFuzzer binaries.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nemo::text::fuzz {
// Encodes arbitrary bytes with a trained byte-level tokenizer; checks the byte round trip,
// decode validity, and the streaming decoder against decode(). Aborts on a violation.
void tokenizer_roundtrip(const uint8_t* data, size_t size);
// Parses and renders arbitrary template text; any outcome but nemo::Error is a bug.
void template_engine(const uint8_t* data, size_t size);
// Feeds arbitrary text to the output parser in random-sized pieces.
void output_parser(const uint8_t* data, size_t size);
}  // namespace nemo::text::fuzz
