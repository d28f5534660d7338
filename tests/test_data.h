// Data for model tests: a prefix of Fashion-MNIST when installed (bytes, normalised on the
// device as the seed recipes do), else synthetic float images with a learnable label (so the
// training checks still mean something without the package).
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>

#include "trident/core/dataset.h"
#include "trident/core/idx.h"

namespace trident::testing {

inline bool real_data_available() {
  return std::filesystem::exists(default_data_directory());
}

// n samples of 1 x 28 x 28 with a bright horizontal band whose row encodes the label.
inline Dataset synthetic_images(int64_t n, uint32_t seed, int64_t classes = 10) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n * 784));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % uint32_t(classes));
    labels[size_t(i)] = label;
    for (int p = 0; p < 784; ++p)
      values[size_t(i * 784 + p)] = noise(rng) * 0.5f + ((p / 28) / 3 == label ? 2.0f : 0.0f);
  }
  Dataset d(std::move(values), {1, 28, 28}, std::move(labels), classes);
  d.set_source("(synthetic)");
  return d;
}

// The first n_train / n_test samples of the default data set (normalised with the MNIST
// notebook's mean and std), or synthetic ones.
inline DatasetSplits small_splits(int64_t n_train, int64_t n_test) {
  if (real_data_available()) {
    DatasetLoadOptions options;
    options.train_limit = n_train;
    options.test_limit = n_test;
    DatasetSplits s = load_idx_directory(default_data_directory(), options);
    Normalization norm;
    norm.divide_by_255 = true;
    norm.mean = {0.1307f};
    norm.std = {0.3081f};
    s.train.set_normalization(norm);
    s.test.set_normalization(norm);
    return s;
  }
  DatasetSplits s;
  s.train = synthetic_images(n_train, 7);
  s.test = synthetic_images(n_test, 8);
  s.source = "(synthetic)";
  return s;
}

}  // namespace trident::testing
