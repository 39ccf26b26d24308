// Shared test helpers: a tiny generated ImageFolder in a temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "data/synthetic.h"

namespace pinfeed::test {

// A fresh directory under the test temp dir, removed first if it exists. The process id keeps tests that
// ctest runs in parallel (one process each) out of each other's way.
inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("pinfeed_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Writes a small synthetic ImageFolder (JPEG files) and returns its root.
inline std::string make_dataset(const std::string& name, int classes = 3, int train_per_class = 8,
                                int val_per_class = 2, int side = 40) {
  data::SyntheticOptions o;
  o.out = fresh_dir(name);
  o.classes = classes;
  o.train_per_class = train_per_class;
  o.val_per_class = val_per_class;
  o.width = side;
  o.height = side;
  o.threads = 2;
  data::generate_synthetic(o);
  return o.out;
}

}  // namespace pinfeed::test
