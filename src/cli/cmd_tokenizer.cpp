// nemotron tokenizer train | encode: a byte-level BPE for a new model (tools/train) and the
// corpus as token ids.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "cli/commands.h"
#include "text/bpe_trainer.h"
#include "text/tokenizer.h"

namespace nemo::cli {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) fail("{}: write failed", tmp);
  }
  std::filesystem::rename(tmp, path);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Command> make_tokenizer_commands() {
  std::vector<Command> v(1);
  struct Opts {
    std::vector<std::string> corpus, inputs;
    int vocab = 2048;
    std::string out, tokenizer;
    CLI::App *train = nullptr, *encode = nullptr;
  };
  auto o = std::make_shared<Opts>();
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("tokenizer", "Train a byte-level BPE tokenizer, or encode text files to ids");
    s->require_subcommand(1);
    o->train = s->add_subcommand("train", "Train on text files; writes tokenizer.json, tokenizer_config.json "
                                           "(Lightning chat template) and chat_template.jinja");
    o->train->add_option("--corpus", o->corpus, "Training text (repeatable)")->required()->check(CLI::ExistingFile);
    o->train->add_option("--vocab", o->vocab, "Vocabulary size (special tokens + 256 bytes + merges)")
        ->check(in_range(300, 1 << 20))
        ->capture_default_str();
    o->train->add_option("--out", o->out, "Output directory")->required();
    o->encode = s->add_subcommand("encode", "Encode files (one document each, no special tokens) to little-endian "
                                            "uint32 ids, </s> (id 2) after every document");
    o->encode->add_option("--tokenizer", o->tokenizer, "Directory with tokenizer.json")->required();
    o->encode->add_option("--out", o->out, "Output .u32 file")->required();
    o->encode->add_option("files", o->inputs, "Text files")->required()->check(CLI::ExistingFile);
    *sub = s;
  };
  v[0].run = [o]() {
    const auto t0 = std::chrono::steady_clock::now();
    if (o->train->parsed()) {
      std::string text;
      for (const auto& f : o->corpus) text += read_file(f);
      const auto specials = text::nemotron_special_tokens();
      const std::string tj = text::train_byte_level_bpe(text, o->vocab, specials);
      std::filesystem::create_directories(o->out);
      const std::filesystem::path d(o->out);
      text::TokenizerConfigOptions to;
      to.chat_template = std::string(text::nemotron_lightning_chat_template());
      write_file(d / "tokenizer.json", tj);
      write_file(d / "tokenizer_config.json", text::make_tokenizer_config(tj, to));
      write_file(d / "chat_template.jinja", std::string(text::nemotron_lightning_chat_template()));
      std::fprintf(stderr, "trained a %d-token byte-level BPE on %.2f MB in %.1f s -> %s\n", o->vocab,
                   double(text.size()) / 1e6, seconds_since(t0), o->out.c_str());
      return 0;
    }
    const auto tok = text::Tokenizer::from_dir(o->tokenizer);
    std::vector<uint32_t> ids;
    size_t bytes = 0;
    std::vector<int32_t> doc;
    for (const auto& f : o->inputs) {
      const std::string t = read_file(f);
      bytes += t.size();
      doc.clear();
      tok.encode_into(t, doc, {.add_special_tokens = false, .parse_special = false});
      for (int32_t x : doc) ids.push_back(uint32_t(x));
      ids.push_back(2);  // </s>: the document boundary
    }
    std::string raw(ids.size() * 4, '\0');
    for (size_t i = 0; i < ids.size(); ++i)
      for (int b = 0; b < 4; ++b) raw[i * 4 + size_t(b)] = char((ids[i] >> (8 * b)) & 0xff);
    write_file(o->out, raw);
    std::fprintf(stderr, "encoded %zu files, %.2f MB -> %zu tokens (%.2f bytes/token) in %.1f s -> %s\n",
                 o->inputs.size(), double(bytes) / 1e6, ids.size(), double(bytes) / double(ids.size()),
                 seconds_since(t0), o->out.c_str());
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
