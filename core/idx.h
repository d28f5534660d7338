// Readers for IDX files (the MNIST / Fashion-MNIST format), raw or gzip-compressed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// One IDX array: dims from the header, elements in file order. Unsigned-byte (type 0x08) arrays
// only, so data.size() == product(dims) and no byte-order decoding is needed.
struct IdxArray {
  std::vector<int64_t> dims;    // dims[0] is the items read (fewer than declared when limited)
  std::vector<uint8_t> data;
  int64_t declared_items = 0;  // dims[0] as the header declares it
};

// Largest array read_idx accepts; a header declaring more is rejected before anything is allocated.
constexpr uint64_t kIdxMaxBytes = uint64_t{4} << 30;  // 4 GiB

// Reads a raw or gzip-compressed IDX file; gzip is detected by the 1f 8b magic, not by the name.
// Throws FormatError naming the file on: a missing file, a bad magic, an element type other than
// 0x08, zero or more than 8 dims, data longer or shorter than the dims imply, more than
// kIdxMaxBytes, and a corrupt or truncated gzip stream.
IdxArray read_idx(const std::string& path);

constexpr uint64_t kIdxAllItems = ~uint64_t{0};
// The same, reading only the first max_items entries along dims[0] (images, labels): nothing past
// them is allocated or, in a gzip file, decompressed (so the tail of such a file is not checked;
// a raw file's length still is). The path must name a regular file (a FIFO is refused at once).
IdxArray read_idx(const std::string& path, uint64_t max_items);

// An image classification split: images normalized to float ((x/255 - mean)/std),
// labels in 0..classes-1.
struct ImageDataset {
  int64_t count = 0, height = 0, width = 0;
  std::vector<float> images;    // [count, height*width], row-major
  std::vector<int32_t> labels;  // [count]
};

struct MnistSplits {
  ImageDataset train, test;
  std::string directory;  // the directory the splits were read from
};

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from dir, each file either raw or with a .gz
// suffix (the raw name wins if both exist), through load_idx_directory (core/dataset.h), then
// converts to float. mean/std default to the MNIST notebook's 0.1307/0.3081. train_limit /
// test_limit (0: all) apply while reading, before the conversion, so only the samples used are
// inflated and converted. Throws FormatError if a file is missing (naming the names tried),
// malformed, if images are not 3-d (or N x 1 x H x W), counts of images and labels differ, train
// and test images differ in size, or a label is >= classes; UsageError if std <= 0 or classes is
// outside 1..256.
MnistSplits load_mnist_directory(const std::string& dir, float mean = 0.1307f, float std = 0.3081f,
                                 int classes = 10, int64_t train_limit = 0, int64_t test_limit = 0);

// Where Debian's dataset-fashion-mnist package puts Fashion-MNIST (scripts/install_deps.sh).
inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";

// $TRIDENT_DATA if set and non-empty, else kFashionMnistDirectory.
std::string default_data_directory();

}  // namespace trident
