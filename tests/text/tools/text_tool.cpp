// Command-line driver for cross-checks and benchmarks of the text layer.
//   encode DIR CORPUS.json OUT.json   ids, decode and round-trip per corpus string
//   bench DIR FILE [REPEAT [CHUNK]]   single-thread encode throughput in MB/s
//   render TEMPLATE CASES.json OUT.json   chat-template render per case
//   train CORPUS VOCAB OUTDIR         synthetic tokenizer dir (tokenizer.json, config, template)
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using nlohmann::json;
using namespace nemo::text;

static std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw nemo::Error("cannot open " + p);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static int cmd_encode(const std::string& dir, const std::string& corpus, const std::string& out) {
  Tokenizer tok = Tokenizer::from_dir(dir);
  json in = json::parse(slurp(corpus));
  json res = json::array();
  for (const auto& s : in) {
    std::string text = s.get<std::string>();
    auto ids = tok.encode(text);
    DecodeOptions raw;
    raw.clean_up_tokenization_spaces = false;
    json r;
    auto ids_plain = tok.encode(text, {.add_special_tokens = false});
    r["ids"] = ids;
    r["ids_plain"] = ids_plain;
    r["decoded"] = tok.decode(ids_plain);
    r["roundtrip"] = tok.decode(tok.encode(text, {.add_special_tokens = false}), raw) == text;
    // Special tokens treated as text must also round-trip.
    EncodeOptions plain;
    plain.add_special_tokens = false;
    plain.parse_special = false;
    r["roundtrip_plain"] = tok.decode(tok.encode(text, plain), raw) == text;
    res.push_back(std::move(r));
  }
  std::ofstream(out) << res.dump();
  return 0;
}

static int cmd_bench(const std::string& dir, const std::string& file, int repeat, size_t chunk) {
  Tokenizer tok = Tokenizer::from_dir(dir);
  std::string text = slurp(file);
  // chunk > 0: separate documents cut after the first newline past every `chunk` bytes.
  std::vector<std::string_view> docs;
  if (chunk > 0) {
    for (size_t start = 0; start < text.size();) {
      size_t cut = text.find('\n', std::min(start + chunk, text.size()));
      cut = cut == std::string::npos ? text.size() : cut + 1;
      docs.push_back(std::string_view(text).substr(start, cut - start));
      start = cut;
    }
  } else {
    docs.push_back(text);
  }
  size_t ntok = 0;
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    std::vector<int32_t> ids;
    for (auto d : docs) {
      ids.clear();
      tok.encode_into(d, ids, {.add_special_tokens = false, .parse_special = true});
      n += ids.size();
    }
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    ntok = n;
  }
  json j{{"impl", "nemotron.cpp"}, {"bytes", text.size()}, {"docs", docs.size()}, {"tokens", ntok}, {"seconds", best},
         {"mb_per_s", text.size() / 1e6 / best}};
  std::cout << j.dump() << "\n";
  return 0;
}

static int cmd_render(const std::string& tmpl_path, const std::string& cases, const std::string& out) {
  ChatTemplate tmpl(slurp(tmpl_path), tmpl_path);
  auto in = nlohmann::ordered_json::parse(slurp(cases));
  json res = json::array();
  for (const auto& c : in) {
    try {
      res.push_back({{"ok", true}, {"text", tmpl.render(c)}});
    } catch (const nemo::Error& e) {
      res.push_back({{"ok", false}, {"error", e.what()}});
    }
  }
  std::ofstream(out) << res.dump();
  return 0;
}

// Writes a complete synthetic tokenizer directory (what the synthetic checkpoint writer does).
static int cmd_train(const std::string& corpus, int vocab, const std::string& out) {
  std::string tj = train_byte_level_bpe(slurp(corpus), vocab, nemotron_special_tokens());
  std::filesystem::create_directories(out);
  std::ofstream(std::filesystem::path(out) / "tokenizer.json", std::ios::binary) << tj;
  std::ofstream(std::filesystem::path(out) / "tokenizer_config.json", std::ios::binary) << make_tokenizer_config(tj);
  std::ofstream(std::filesystem::path(out) / "chat_template.jinja", std::ios::binary) << nemotron_lightning_chat_template();
  return 0;
}

int main(int argc, char** argv) {
  try {
    std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "encode" && argc == 5) return cmd_encode(argv[2], argv[3], argv[4]);
    if (cmd == "bench" && argc >= 4) return cmd_bench(argv[2], argv[3], argc > 4 ? std::atoi(argv[4]) : 3, argc > 5 ? size_t(std::atoll(argv[5])) : 0);
    if (cmd == "render" && argc == 5) return cmd_render(argv[2], argv[3], argv[4]);
    if (cmd == "train" && argc == 5) return cmd_train(argv[2], std::atoi(argv[3]), argv[4]);
    std::cerr << "usage: nemotron_text_tool encode DIR CORPUS OUT | bench DIR FILE [N [CHUNK]] | render TEMPLATE CASES OUT | train CORPUS VOCAB OUTDIR\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
