// Data for model tests: a prefix of Fashion-MNIST when installed, else synthetic images with a
// learnable label (so the training checks still mean something without the package).
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>

#include "trident/core/idx.h"

namespace trident::testing {

inline bool real_data_available() {
  return std::filesystem::exists(default_data_directory());
}

// The first n_train / n_test samples of the default data set, or synthetic ones.
inline MnistSplits small_splits(int64_t n_train, int64_t n_test) {
  MnistSplits s;
  if (real_data_available()) {
    static const MnistSplits full = load_mnist_directory(default_data_directory());
    s = full;
    auto cut = [](ImageDataset& d, int64_t n) {
      d.count = n;
      d.images.resize(static_cast<size_t>(n * d.height * d.width));
      d.labels.resize(static_cast<size_t>(n));
    };
    cut(s.train, n_train);
    cut(s.test, n_test);
    return s;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  auto make = [&](ImageDataset& d, int64_t n) {
    d.count = n; d.height = 28; d.width = 28;
    d.images.resize(static_cast<size_t>(n * 784));
    d.labels.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(rng() % 10);
      d.labels[static_cast<size_t>(i)] = label;
      for (int p = 0; p < 784; ++p)  // a bright horizontal band whose row encodes the label
        d.images[static_cast<size_t>(i * 784 + p)] =
            noise(rng) * 0.5f + ((p / 28) / 3 == label ? 2.0f : 0.0f);
    }
  };
  make(s.train, n_train);
  make(s.test, n_test);
  s.directory = "(synthetic)";
  return s;
}

}  // namespace trident::testing
