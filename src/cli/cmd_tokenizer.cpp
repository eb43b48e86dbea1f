// nemotron tokenizer: train a byte-level BPE tokenizer on a corpus (Nemotron's special tokens and
// the Lightning chat template), encode files into a training stream of uint32 ids, decode one.
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "cli/commands.h"
#include "text/bpe_trainer.h"
#include "text/tokenizer.h"

namespace nemo::cli {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the .u32 stream is written as in memory");

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int train(const std::vector<std::string>& corpora, int vocab, const std::string& out) {
  auto t0 = std::chrono::steady_clock::now();
  std::string corpus;
  for (const auto& path : corpora) {
    const MappedFile f(path);
    // Files are joined at line breaks so no word spans two of them.
    if (!corpus.empty() && corpus.back() != '\n') corpus += '\n';
    corpus.append(f.text());
  }
  std::fprintf(stderr, "tokenizer: read %zu file(s), %.2f MB in %.2f s; training vocab %d...\n",
               corpora.size(), double(corpus.size()) / 1e6, seconds_since(t0), vocab);
  t0 = std::chrono::steady_clock::now();
  const std::string tj = text::train_byte_level_bpe(corpus, vocab, text::nemotron_special_tokens());
  const double train_s = seconds_since(t0);
  text::write_tokenizer_dir(out, tj);
  const auto j = nlohmann::json::parse(tj);
  const size_t merges = j["model"]["merges"].size(), added = j["added_tokens"].size();
  const size_t reserved = added - text::nemotron_special_tokens().size();
  std::fprintf(stderr, "tokenizer: trained %zu merges in %.2f s (%.2f MB/s)\n", merges, train_s,
               double(corpus.size()) / 1e6 / std::max(train_s, 1e-9));
  if (reserved > 0)
    std::fprintf(stderr,
                 "note: the corpus ran out of pairs to merge; %zu <|reserved_N|> tokens fill the "
                 "vocabulary\n",
                 reserved);
  std::printf("wrote %s: vocab %d (%zu special, 256 bytes, %zu merges)\n", out.c_str(), vocab,
              added, merges);
  return 0;
}

int encode(const std::string& dir, const std::vector<std::string>& files, const std::string& out,
           bool parse_special) {
  const auto t0 = std::chrono::steady_clock::now();
  const text::Tokenizer tok = text::Tokenizer::from_dir(dir);
  const auto eos = tok.token_to_id("</s>");
  if (!eos)
    fail("{}: no '</s>' token to end documents with",
         (std::filesystem::path(dir) / "tokenizer.json").string());
  AtomicFile f(out);
  std::vector<int32_t> ids;
  uint64_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const MappedFile in(files[i]);
    ids.clear();
    tok.encode_into(in.text(), ids, {.add_special_tokens = false, .parse_special = parse_special});
    bytes += in.size();
    tokens += ids.size();
    ids.push_back(*eos);
    f.stream().write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 4));
    if (files.size() >= 20 && (i + 1) % (files.size() / 10) == 0)
      std::fprintf(stderr, "encode: %zu / %zu files, %.2f MB, %llu tokens\n", i + 1, files.size(),
                   double(bytes) / 1e6, (unsigned long long)tokens);
  }
  f.commit();
  const double s = seconds_since(t0);
  std::printf(
      "wrote %s: %zu documents, %llu tokens + %zu EOS (id %d), %.2f MB, %.3f bytes/token, %.2f s "
      "(%.2f MB/s)\n",
      out.c_str(), files.size(), (unsigned long long)tokens, files.size(), *eos,
      double(bytes) / 1e6, tokens ? double(bytes) / double(tokens) : 0.0, s,
      double(bytes) / 1e6 / std::max(s, 1e-9));
  return 0;
}

// Raw token bytes (exact for any input, valid UTF-8 or not); the EOS after each document is
// dropped, so decoding an encoded stream gives the input files back to back.
int decode(const std::string& dir, const std::string& in, const std::string& out) {
  const text::Tokenizer tok = text::Tokenizer::from_dir(dir);
  const auto eos = tok.token_to_id("</s>");
  const MappedFile f(in);
  if (f.size() % 4 != 0) fail("{}: {} bytes is not a whole number of uint32 ids", in, f.size());
  AtomicFile o(out);
  bool first = true;
  for (size_t i = 0; i < f.size() / 4; ++i) {
    uint32_t id;
    std::memcpy(&id, f.data() + 4 * i, 4);
    if (id >= uint32_t(tok.vocab_size()))
      fail("{}: id {} at position {} is outside the vocabulary", in, id, i);
    if (eos && int32_t(id) == *eos) {
      first = true;
      continue;
    }
    o.stream() << tok.token_bytes(int32_t(id), first);
    first = false;
  }
  o.commit();
  return 0;
}

}  // namespace

std::vector<Command> make_tokenizer_commands() {
  struct Opts {
    std::vector<std::string> corpora, files;
    int vocab = 0;
    std::string out, dir, in;
    bool parse_special = false;
  };
  auto o = std::make_shared<Opts>();
  auto parent = std::make_shared<CLI::App*>(nullptr);
  std::vector<Command> v(3);
  // The three share one `tokenizer` parent, made by whichever attaches first.
  auto tokenizer_app = [parent](CLI::App& app) {
    if (!*parent) {
      *parent = app.add_subcommand("tokenizer",
                                   "Train a BPE tokenizer, encode files to token ids, decode them");
      (*parent)->require_subcommand(1);
    }
    return *parent;
  };
  v[0].attach_fn = [o, tokenizer_app, sub = v[0].sub](CLI::App& app) {
    auto* s =
        tokenizer_app(app)->add_subcommand("train",
                                           "Byte-level BPE with Nemotron's special tokens; writes "
                                           "tokenizer.json, tokenizer_config.json "
                                           "(Lightning chat template) and chat_template.jinja");
    s->add_option("--corpus", o->corpora,
                  "Training text (repeatable; files are joined at line breaks)")
        ->required()
        ->check(CLI::ExistingFile);
    s->add_option("--vocab", o->vocab, "Vocabulary size (special tokens + 256 bytes + merges)")
        ->required()
        ->check(in_range(int(text::nemotron_special_tokens().size()) + 256, 1 << 24));
    s->add_option("--out", o->out, "Output directory")->required();
    *sub = s;
  };
  v[0].run = [o]() { return train(o->corpora, o->vocab, o->out); };
  v[1].attach_fn = [o, tokenizer_app, sub = v[1].sub](CLI::App& app) {
    auto* s =
        tokenizer_app(app)->add_subcommand("encode",
                                           "Encode each file as one document (no BOS/EOS added) "
                                           "into little-endian uint32 ids, </s> after each");
    s->add_option("--tokenizer", o->dir, "Directory with tokenizer.json")->required();
    s->add_option("--out", o->out, "Output file (.u32)")->required();
    s->add_option("files", o->files, "Input files, one document each")
        ->required()
        ->check(CLI::ExistingFile);
    s->add_flag("--parse-special", o->parse_special,
                "Special-token strings in the text become their ids (default: plain text)");
    *sub = s;
  };
  v[1].run = [o]() { return encode(o->dir, o->files, o->out, o->parse_special); };
  v[2].attach_fn = [o, tokenizer_app, sub = v[2].sub](CLI::App& app) {
    auto* s = tokenizer_app(app)->add_subcommand(
        "decode",
        "Write the bytes of a .u32 id stream back out (the </s> after each document dropped)");
    s->add_option("--tokenizer", o->dir, "Directory with tokenizer.json")->required();
    s->add_option("--out", o->out, "Output file")->required();
    s->add_option("input", o->in, "Input .u32 file")->required();
    *sub = s;
  };
  v[2].run = [o]() { return decode(o->dir, o->in, o->out); };
  return v;
}

}  // namespace nemo::cli
