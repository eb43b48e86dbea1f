// Random-input driver for the fuzz targets, over their committed seed corpus too (the same
// functions build as libFuzzer binaries with clang: tests/fuzz/, scripts/fuzz.sh). Each test
// counts the outcomes, so a target that stopped reaching its code fails here.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "../support/fuzz_corpus.h"
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
  nemo::test::FuzzCounts c;
  c.run_corpus("tokenizer_roundtrip", nemo::text::fuzz::tokenizer_roundtrip, 0, rng);
  for (int it = 0; it < 3000; ++it)
    c.run(nemo::text::fuzz::tokenizer_roundtrip, random_input(rng, kDict));
  EXPECT_GE(c.accepted, 3000);
}

TEST(Fuzz, TokenizerJson) {
  // Seeds: small tokenizer.json files (byte-level BPE with a Split regex and added tokens, a
  // SentencePiece-style byte_fallback one, Digits + NFD); mutations of them mostly fail to load,
  // some still load and encode.
  std::mt19937 rng(4);
  nemo::test::FuzzCounts c;
  c.run_corpus("tokenizer_json", nemo::text::fuzz::tokenizer_json, 2000, rng);
  EXPECT_GE(c.accepted, 50);
  EXPECT_GE(c.rejected, 500);
}

TEST(Fuzz, TemplateEngine) {
  std::mt19937 rng(2);
  nemo::test::FuzzCounts c;
  c.run_corpus("template_engine", nemo::text::fuzz::template_engine, 0, rng);
  for (int it = 0; it < 5000; ++it)
    c.run(nemo::text::fuzz::template_engine, random_input(rng, kDict));
  // Random snippets both render (plain text, well-formed tags) and fail (unbalanced tags).
  std::printf("template_engine: %d rendered, %d rejected\n", c.accepted, c.rejected);
  EXPECT_GE(c.accepted, 2000);
  EXPECT_GE(c.rejected, 500);
  // Mutations of the real template: truncations and byte flips must error cleanly.
  std::string real(nemo::text::nemotron_lightning_chat_template());
  nemo::test::FuzzCounts m;
  for (int it = 0; it < 300; ++it) {
    std::string s = real.substr(0, rng() % real.size());
    if (!s.empty() && rng() % 2) s[rng() % s.size()] = char(rng() % 256);
    m.run(nemo::text::fuzz::template_engine, s);
  }
  EXPECT_GE(m.rejected, 150);
}

TEST(Fuzz, OutputParser) {
  // Chunking invariance is checked on every input; many of them hold complete tool calls.
  std::mt19937 rng(3);
  nemo::test::FuzzCounts c;
  c.run_corpus("output_parser", nemo::text::fuzz::output_parser, 2000, rng);
  for (int it = 0; it < 5000; ++it)
    c.run(nemo::text::fuzz::output_parser, random_input(rng, kDict));
  EXPECT_GE(c.accepted, 500);
}
