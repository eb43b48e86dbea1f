// The io fuzz targets (tests/io/fuzz_targets.cpp) over their committed seed corpus and
// mutations of it; the same functions run as libFuzzer binaries (tests/fuzz/, scripts/fuzz.sh).
#include <gtest/gtest.h>

#include <random>

#include "../support/fuzz_corpus.h"
#include "fuzz_targets.h"

TEST(Fuzz, SafetensorsFile) {
  std::mt19937 rng(1);
  nemo::test::FuzzCounts c;
  c.run_corpus("safetensors_file", nemo::io::fuzz::safetensors_file, 3000, rng);
  // Both sides of the parser are exercised: most mutations are caught, some stay valid.
  EXPECT_GE(c.accepted, 80);
  EXPECT_GE(c.rejected, 1500);
}

TEST(Fuzz, ConfigJson) {
  std::mt19937 rng(2);
  nemo::test::FuzzCounts c;
  c.run_corpus("config_json", nemo::io::fuzz::config_json, 3000, rng);
  EXPECT_GE(c.accepted, 100);
  EXPECT_GE(c.rejected, 1000);
}
