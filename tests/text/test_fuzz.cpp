// Random-input driver for the fuzz targets (the same functions build as libFuzzer
// binaries with -DNEMOTRON_TEXT_FUZZ=ON and clang; see tests/text/tests.cmake).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "fuzz_targets.h"
#include "test_util.h"
#include "text/bpe_trainer.h"

namespace {
// Random inputs biased towards interesting material: template syntax, tags, UTF-8.
std::string random_input(std::mt19937& rng, const std::vector<std::string>& dict) {
  std::string s;
  int n = rng() % 24;
  for (int k = 0; k < n; ++k) {
    switch (rng() % 4) {
      case 0: s.push_back(char(rng() % 256)); break;
      case 1: s += dict[rng() % dict.size()]; break;
      default: {
        static constexpr std::string_view kChars = "ab {}%#-|.()[]'\"\n~+*/=<>:,_xy01";
        s.push_back(kChars[rng() % kChars.size()]);
        break;
      }
    }
  }
  return s;
}
const std::vector<std::string> kDict = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", " if ", " for x in xs ", "endfor", "endif", "else", "elif",
    " set ns = namespace(a=1) ", "macro m(a)", "endmacro", "m(1)", "loop.index", "loop.previtem", "| tojson",
    "| items", "| trim", "is mapping", "is defined", "messages", "tools", "d.a", "xs[1:]", "xs[-1]", " ~ ", "'s'",
    "\"q\"", "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=f>", "<parameter=x>", "</parameter>",
    "</function>", "<|im_start|>", "<|im_end|>", "\xF0\x9F\x98\x80", "\xE6\x9D\xB1", "\xC3", "\x80", " ", "\n\n"};
}  // namespace

TEST(Fuzz, TokenizerRoundTrip) {
  std::mt19937 rng(1);
  for (int it = 0; it < 3000; ++it) {
    std::string s = random_input(rng, kDict);
    nemo::text::fuzz::tokenizer_roundtrip(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
}

TEST(Fuzz, TemplateEngine) {
  std::mt19937 rng(2);
  for (int it = 0; it < 5000; ++it) {
    std::string s = random_input(rng, kDict);
    nemo::text::fuzz::template_engine(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  // Mutations of the real template: truncations and byte flips must error cleanly.
  std::string real(nemo::text::nemotron_lightning_chat_template());
  for (int it = 0; it < 300; ++it) {
    std::string s = real.substr(0, rng() % real.size());
    if (!s.empty() && rng() % 2) s[rng() % s.size()] = char(rng() % 256);
    nemo::text::fuzz::template_engine(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
}

TEST(Fuzz, OutputParser) {
  std::mt19937 rng(3);
  for (int it = 0; it < 5000; ++it) {
    std::string s = random_input(rng, kDict);
    nemo::text::fuzz::output_parser(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
}
