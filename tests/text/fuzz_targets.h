// Fuzz entry points shared by the gtest drivers (tests/text/test_fuzz.cpp) and the libFuzzer
// binaries (tests/fuzz/). Each checks properties of its input and aborts on a violation; what
// it returns lets the gtest drivers assert that the inputs exercised the code (counts).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../support/fuzz_check.h"

namespace nemo::text::fuzz {
using nemo::fuzz::Outcome;

// Encodes arbitrary bytes with a trained byte-level tokenizer; checks the byte round trip,
// decode validity, and the streaming decoder against decode(). Always Accepted.
Outcome tokenizer_roundtrip(const uint8_t* data, size_t size);
// Loads arbitrary text as a tokenizer.json: it loads or throws nemo::Error; a loaded one
// encodes any text deterministically to ids inside its vocabulary and decodes to valid UTF-8.
Outcome tokenizer_json(const uint8_t* data, size_t size);
// Parses and renders arbitrary template text: parse and render either succeed or throw
// nemo::Error (anything else is a bug), and a render is deterministic (the same text twice,
// and from a second parse of the same source).
Outcome template_engine(const uint8_t* data, size_t size);
// Parses arbitrary generated text (data[0] picks the options and a chunk size): the events of
// any chunking (the whole text, 1-byte pieces, N-byte pieces) concatenate to the same
// reasoning, content and tool calls. Accepted if the text held a tool call.
Outcome output_parser(const uint8_t* data, size_t size);
}  // namespace nemo::text::fuzz
