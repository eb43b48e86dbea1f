// Test helper: the committed seed corpus of a fuzz target (tests/fuzz/corpus/<target>/), which
// the gtest drivers replay and mutate the way the libFuzzer binaries start from it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_check.h"

namespace nemo::test {

inline std::vector<std::string> fuzz_corpus(const std::string& target) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(
           std::filesystem::path(NEMOTRON_SOURCE_DIR) / "tests/fuzz/corpus" / target))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

// A cheap libFuzzer-style mutation: a truncation, byte flips, or a splice of another seed.
inline std::string mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937& rng) {
  switch (rng() % 4) {
    case 0:
      s.resize(s.empty() ? 0 : rng() % s.size());
      break;
    case 1:
      for (int k = 1 + rng() % 4; k > 0 && !s.empty(); --k)
        s[rng() % s.size()] ^= char(1 << (rng() % 8));
      break;
    case 2:
      if (!s.empty()) s[rng() % s.size()] = "0-9\"{}[],:.e-1"[rng() % 14];
      break;
    default: {
      const std::string& o = seeds[rng() % seeds.size()];
      const size_t at = s.empty() ? 0 : rng() % s.size();
      s = s.substr(0, at) + o.substr(o.empty() ? 0 : rng() % o.size());
    }
  }
  return s;
}

// How many inputs a target accepted and rejected: the gtest drivers assert both, so a target
// that stopped reaching its code (everything rejected, or nothing) fails.
struct FuzzCounts {
  int accepted = 0, rejected = 0;
  template <typename Target>
  void run(Target target, const std::string& s) {
    (target(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == fuzz::Outcome::Accepted
         ? accepted
         : rejected)++;
  }
  // Every seed of `corpus`, then `n` mutations of them.
  template <typename Target>
  void run_corpus(const std::string& corpus, Target target, int n, std::mt19937& rng) {
    const auto seeds = fuzz_corpus(corpus);
    for (const auto& s : seeds) run(target, s);
    for (int i = 0; i < n && !seeds.empty(); ++i)
      run(target, mutate(seeds[rng() % seeds.size()], seeds, rng));
    std::printf("%s: %d accepted, %d rejected\n", corpus.c_str(), accepted, rejected);
  }
};

}  // namespace nemo::test
