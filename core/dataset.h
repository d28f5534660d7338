// Dataset: N labelled samples of one shape, kept in host memory as loaded (uint8 or float32, never
// widened), with the class count and the per-channel normalization a device applies later; and
// its loaders (an IDX directory, NumPy .npy / .npz, memory the application owns).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/dtype.h"

namespace trident {

// How a stored value x of channel c becomes a model input:
//   (x / 255 - mean[c]) / std[c]  when divide_by_255 (byte images), else (x - mean[c]) / std[c].
// mean and std hold one value per channel, or one value for every channel; empty means 0 and 1.
struct Normalization {
  bool divide_by_255 = false;
  std::vector<float> mean, std;
};

class Dataset {
 public:
  Dataset() = default;  // no samples
  // Memory the application owns, copied: values holds labels.size() samples of sample_shape
  // (any rank >= 1), row-major. classes 0: the largest label + 1. uint8 values get
  // divide_by_255 normalization, float32 none; set_normalization changes it. Throws ShapeError
  // if the sizes disagree and UsageError for a negative label, a label >= classes, a
  // non-finite float value, or more than 2^31 - 1 samples.
  Dataset(std::vector<uint8_t> values, std::vector<int64_t> sample_shape, std::vector<int32_t> labels,
          int64_t classes = 0);
  Dataset(std::vector<float> values, std::vector<int64_t> sample_shape, std::vector<int32_t> labels,
          int64_t classes = 0);
  // The same from raw pointers: count samples at values, count labels at labels.
  static Dataset from_memory(const uint8_t* values, int64_t count, std::vector<int64_t> sample_shape,
                             const int32_t* labels, int64_t classes = 0);
  static Dataset from_memory(const float* values, int64_t count, std::vector<int64_t> sample_shape,
                             const int32_t* labels, int64_t classes = 0);

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }  // N
  bool empty() const { return labels_.empty(); }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t sample_numel() const { return sample_numel_; }
  // sample_shape[0] for samples of rank >= 3 (C x H x W), else 1.
  int64_t channels() const;
  DType dtype() const { return dtype_; }  // DType::u8 or DType::f32
  size_t sample_bytes() const { return static_cast<size_t>(sample_numel_) * dtype_size(dtype_); }
  // N * sample_bytes() bytes, row-major; uint8_data()/float_data() are the same typed (nullptr
  // when the dtype differs).
  const void* data() const;
  const uint8_t* uint8_data() const;
  const float* float_data() const;
  const std::vector<int32_t>& labels() const { return labels_; }
  int64_t classes() const { return classes_; }
  const Normalization& normalization() const { return normalization_; }
  // Throws UsageError if mean/std have neither 1 nor channels() entries, or a std is not > 0,
  // or a value is not finite.
  void set_normalization(Normalization normalization);
  // Where the samples came from, for messages ("DIR/train-images-idx3-ubyte.gz", "memory").
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // The first min(n, size()) samples; shares the sample storage (no copy).
  Dataset head(int64_t n) const;
  // Samples [first, first + count) as normalized float32, [count, sample_numel()] row-major:
  // the host reference of what a device computes, and the legacy MnistSplits path.
  std::vector<float> normalized(int64_t first, int64_t count) const;

 private:
  struct Storage {
    std::vector<uint8_t> u8;
    std::vector<float> f32;
  };
  void init(std::vector<int64_t> sample_shape, std::vector<int32_t> labels, int64_t classes, size_t value_count);

  std::shared_ptr<const Storage> storage_;
  DType dtype_ = DType::u8;
  std::vector<int64_t> sample_shape_;
  int64_t sample_numel_ = 0;
  std::vector<int32_t> labels_;
  int64_t classes_ = 0;
  Normalization normalization_;
  std::string source_ = "memory";
};

// A training and a test split with the same sample shape and class count.
struct DatasetSplits {
  Dataset train, test;
  std::string source;  // the directory or file they came from
};

struct DatasetLoadOptions {
  // At most this many samples of each split are read, inflated and allocated (0: all of them);
  // what lies beyond is never decompressed, so a run's memory is bounded by the samples it uses.
  int64_t train_limit = 0, test_limit = 0;
  // 0: the largest label of either split + 1; else every label must be below it.
  int64_t classes = 0;
};

// {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or .gz (the raw name wins), images
// N x H x W (C = 1) or N x C x H x W. Throws FormatError naming the file on a missing or
// malformed file, images and labels of different counts, train and test samples of different
// shapes, and a label outside the class count.
DatasetSplits load_idx_directory(const std::string& dir, const DatasetLoadOptions& options = {});

// A NumPy .npz (zip, entries stored or deflated) holding x_train, y_train, x_test, y_test as
// Keras' mnist.npz does. Samples uint8 or float32, N x C x H x W or N x H x W (C = 1; any rank
// >= 2 is accepted, N x D giving samples of shape [D]); labels any integer dtype, 1-d, converted
// to int32 with range checks. Throws FormatError naming the file and entry.
DatasetSplits load_npz(const std::string& path, const DatasetLoadOptions& options = {});

// One split from a samples .npy and a labels .npy (same rules as the .npz entries); limit 0: all.
Dataset load_npy_dataset(const std::string& samples_path, const std::string& labels_path, int64_t limit = 0,
                         int64_t classes = 0);

// A directory: load_idx_directory; a file ending in .npz: load_npz; anything else is a
// FormatError that says what is accepted.
DatasetSplits load_dataset(const std::string& path, const DatasetLoadOptions& options = {});

// Fashion-MNIST's class names, index = label (for printing predictions).
extern const std::array<const char*, 10> kFashionMnistClassNames;

}  // namespace trident
