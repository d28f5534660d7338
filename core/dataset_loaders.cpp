// Dataset loaders: an IDX directory, NumPy .npz / .npy pairs. Each split is read only as far as
// its limit, every file's dimensions are checked against the others, errors name the file.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "trident/core/byte_source.h"
#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/files.h"
#include "trident/core/finite.h"
#include "trident/core/idx.h"
#include "trident/core/log.h"
#include "trident/core/npy.h"
#include "trident/core/zip.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

uint64_t limit_of(int64_t limit) { return limit > 0 ? static_cast<uint64_t>(limit) : ~uint64_t{0}; }

// One split as read, before the class count of both splits is known.
struct RawSplit {
  std::string samples_name, labels_name;
  DType dtype = DType::u8;
  std::vector<int64_t> sample_shape;  // [C, H, W] or, from .npy, any rank >= 1
  std::vector<uint8_t> samples;       // u8 values, or f32 bytes
  std::vector<int32_t> labels;
};

// Samples N x H x W get one channel; N x D and N x C x H x W (and higher) keep their shape.
std::vector<int64_t> sample_shape_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape(dims.begin() + 1, dims.end());
  if (shape.size() == 2) shape.insert(shape.begin(), 1);
  return shape;
}

void check_counts(const RawSplit& s, int64_t samples_declared, int64_t labels_declared, const char* noun) {
  if (samples_declared != labels_declared)
    throw FormatError(s.samples_name + " holds " + std::to_string(samples_declared) + " " + noun + " but " +
                      s.labels_name + " holds " + std::to_string(labels_declared) + " labels");
}

void check_nonempty(const std::string& name, const std::vector<int64_t>& dims) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end())
    throw FormatError(name + ": holds no samples (dims " + dims_text(dims) + ")");
}

// Sample shapes of train and test must agree (a model is built for one).
void check_same_shape(const RawSplit& train, const RawSplit& test) {
  if (train.sample_shape != test.sample_shape || train.dtype != test.dtype)
    throw FormatError(test.samples_name + ": test samples are " + dims_text(test.sample_shape) + " " +
                      dtype_name(test.dtype) + " but the training samples in " + train.samples_name + " are " +
                      dims_text(train.sample_shape) + " " + dtype_name(train.dtype) +
                      " (both splits must have one sample shape and type)");
}

int64_t class_count(const RawSplit& train, const RawSplit& test, int64_t given) {
  int64_t largest = -1;
  for (const RawSplit* s : {&train, &test}) {
    const auto it = std::max_element(s->labels.begin(), s->labels.end());
    if (it == s->labels.end()) continue;
    if (given > 0 && *it >= given)
      throw FormatError(s->labels_name + ": label " + std::to_string(*it) + " at index " +
                        std::to_string(it - s->labels.begin()) + " is outside 0.." + std::to_string(given - 1) +
                        " (largest label in the file: " + std::to_string(*it) + ")");
    largest = std::max<int64_t>(largest, *it);
  }
  return given > 0 ? given : largest + 1;
}

Dataset to_dataset(RawSplit& s, int64_t classes) {
  Dataset d;
  if (s.dtype == DType::u8) {
    d = Dataset(std::move(s.samples), s.sample_shape, std::move(s.labels), classes);
  } else {
    std::vector<float> values(s.samples.size() / sizeof(float));
    std::memcpy(values.data(), s.samples.data(), values.size() * sizeof(float));
    std::vector<uint8_t>().swap(s.samples);
    d = Dataset(std::move(values), s.sample_shape, std::move(s.labels), classes);
  }
  d.set_source(s.samples_name);
  return d;
}

DatasetSplits finish(RawSplit& train, RawSplit& test, const DatasetLoadOptions& options, const std::string& source) {
  check_same_shape(train, test);
  const int64_t classes = class_count(train, test, options.classes);
  DatasetSplits out;
  out.source = source;
  out.train = to_dataset(train, classes);
  out.test = to_dataset(test, classes);
  return out;
}

// ---- IDX ----

// dir/base if it exists, else dir/base.gz; neither is a FormatError that lists both and says what to do.
std::string find_idx(const std::string& dir, const std::string& base) {
  const std::string plain = (fs::path(dir) / base).string();
  const std::string gz = plain + ".gz";
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain;
  if (fs::exists(gz, ec)) return gz;
  const std::string where = fs::is_directory(dir, ec) ? "" : " (the directory does not exist)";
  throw FormatError(dir + ": missing MNIST file " + base + where + "; tried " + plain + " and " + gz +
                    ". Pass --data DIR (or set TRIDENT_DATA) to a directory holding the (Fashion-)MNIST IDX files");
}

RawSplit read_idx_split(const std::string& dir, const std::string& prefix, int64_t limit) {
  RawSplit s;
  s.samples_name = find_idx(dir, prefix + "-images-idx3-ubyte");
  s.labels_name = find_idx(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(s.samples_name, limit_of(limit));
  if (images.dims.size() != 3 && images.dims.size() != 4) {
    std::vector<int64_t> declared = images.dims;
    declared[0] = images.declared_items;
    throw FormatError(s.samples_name + ": expected image dims [count, height, width] or [count, channels, height, "
                      "width], got " + std::to_string(images.dims.size()) + "-d " + dims_text(declared));
  }
  std::vector<int64_t> declared = images.dims;
  declared[0] = images.declared_items;
  check_nonempty(s.samples_name, declared);
  IdxArray labels = read_idx(s.labels_name, limit_of(limit));
  if (labels.dims.size() != 1)
    throw FormatError(s.labels_name + ": expected label dims [count], got " + std::to_string(labels.dims.size()) +
                      "-d " + dims_text(labels.dims));
  check_counts(s, images.declared_items, labels.declared_items, "images");
  s.sample_shape = sample_shape_of(images.dims);
  s.samples = std::move(images.data);
  s.labels.assign(labels.data.begin(), labels.data.end());
  return s;
}

// ---- NumPy ----

// Checks a samples array (uint8 or float32, rank >= 2, finite) read from `name`.
void take_samples(RawSplit& s, NpyArray& a) {
  const NpyHeader& h = a.header;
  const bool u8 = h.kind == 'u' && h.item_size == 1, f32 = h.kind == 'f' && h.item_size == 4;
  if (!u8 && !f32)
    throw FormatError(s.samples_name + ": samples of dtype '" + h.descr +
                      "' are not supported; use uint8 or float32 (e.g. x.astype(np.float32))");
  if (h.shape.size() < 2)
    throw FormatError(s.samples_name + ": samples need shape (N, ...) with at least 2 dimensions, got " +
                      std::to_string(h.shape.size()) + "-d " + dims_text(h.shape));
  check_nonempty(s.samples_name, h.shape);
  s.dtype = u8 ? DType::u8 : DType::f32;
  s.sample_shape = sample_shape_of(a.shape);
  // N x H x W x C (Keras' and TensorFlow's layout) reads as C = H channels of H x W images:
  // it trains, so say what it looks like.
  const std::vector<int64_t>& d = h.shape;
  if (d.size() == 4 && (d[3] == 1 || d[3] == 3 || d[3] == 4) && d[1] > 4 && d[2] > 4)
    log_warning(s.samples_name + ": samples " + dims_text(d) + " are read as N x C x H x W (" +
                std::to_string(d[1]) + " channels of " + std::to_string(d[2]) + " x " +
                std::to_string(d[3]) + "); if they are N x H x W x C, store "
                "np.transpose(x, (0, 3, 1, 2)) instead");
  if (f32) {
    const size_t numel = a.bytes.size() / 4, per_sample = numel / static_cast<size_t>(std::max<int64_t>(a.shape[0], 1));
    const int64_t bad = first_non_finite(a.bytes.data(), static_cast<int64_t>(numel));
    if (bad >= 0) {
      const size_t i = static_cast<size_t>(bad);
      float v;
      std::memcpy(&v, a.bytes.data() + 4 * i, 4);
      throw FormatError(s.samples_name + ": value " + std::to_string(i % per_sample) + " of sample " +
                        std::to_string(i / per_sample) + " is " + (std::isnan(v) ? "NaN" : "infinite"));
    }
  }
  s.samples = std::move(a.bytes);
}

// Converts integer labels of any width to int32, refusing negatives and values past INT32_MAX.
void take_labels(RawSplit& s, const NpyArray& a) {
  const NpyHeader& h = a.header;
  if (h.kind != 'u' && h.kind != 'i')
    throw FormatError(s.labels_name + ": labels of dtype '" + h.descr + "' are not integers");
  if (h.shape.size() != 1)
    throw FormatError(s.labels_name + ": labels need shape (N,), got " + std::to_string(h.shape.size()) + "-d " +
                      dims_text(h.shape));
  const size_t n = static_cast<size_t>(a.shape[0]), size = static_cast<size_t>(h.item_size);
  s.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t raw = 0;
    for (size_t b = size; b-- > 0;) raw = (raw << 8) | a.bytes[i * size + b];
    int64_t v = static_cast<int64_t>(raw);
    if (h.kind == 'i' && size < 8 && (raw >> (8 * size - 1)) != 0) v = static_cast<int64_t>(raw) - (int64_t{1} << (8 * size));
    const bool negative = h.kind == 'i' ? v < 0 : false;
    if (negative || (h.kind == 'u' && raw > static_cast<uint64_t>(INT32_MAX)) || v > INT32_MAX)
      throw FormatError(s.labels_name + ": label " + (h.kind == 'u' ? std::to_string(raw) : std::to_string(v)) +
                        " at index " + std::to_string(i) + " is outside 0.." + std::to_string(INT32_MAX));
    s.labels[i] = static_cast<int32_t>(v);
  }
}

RawSplit read_npz_split(ZipReader& zip, const std::string& x, const std::string& y, int64_t limit) {
  RawSplit s;
  NpyArray arrays[2];
  for (int k = 0; k < 2; ++k) {
    const std::string entry_name = (k == 0 ? x : y) + ".npy";
    const ZipEntry* entry = zip.find(entry_name);
    if (entry == nullptr) {
      std::string found;
      for (const ZipEntry& e : zip.entries()) found += (found.empty() ? "" : ", ") + e.name;
      throw FormatError(zip.path() + ": no entry " + entry_name + " (an .npz holds x_train, y_train, x_test, y_test " +
                        "as Keras' mnist.npz does; this one holds: " + (found.empty() ? "nothing" : found) + ")");
    }
    std::unique_ptr<ByteSource> src = zip.open(*entry);
    arrays[k] = read_npy(*src, limit_of(limit), entry->size);
    const NpyHeader& h = arrays[k].header;
    if (h.shape.empty() || arrays[k].shape[0] == h.shape[0]) zip.check_complete(*entry, *src);
    (k == 0 ? s.samples_name : s.labels_name) = src->name();
  }
  take_samples(s, arrays[0]);
  take_labels(s, arrays[1]);
  check_counts(s, arrays[0].header.shape[0], arrays[1].header.shape[0], "samples");
  return s;
}

RawSplit read_npy_split(const std::string& samples_path, const std::string& labels_path, int64_t limit) {
  RawSplit s;
  s.samples_name = samples_path;
  s.labels_name = labels_path;
  NpyArray samples = load_npy(samples_path, limit_of(limit));
  NpyArray labels = load_npy(labels_path, limit_of(limit));
  take_samples(s, samples);
  take_labels(s, labels);
  check_counts(s, samples.header.shape[0], labels.header.shape[0], "samples");
  return s;
}

}  // namespace

DatasetSplits load_idx_directory(const std::string& dir, const DatasetLoadOptions& options) {
  RawSplit train = read_idx_split(dir, "train", options.train_limit);
  RawSplit test = read_idx_split(dir, "t10k", options.test_limit);
  return finish(train, test, options, dir);
}

DatasetSplits load_npz(const std::string& path, const DatasetLoadOptions& options) {
  ZipReader zip(path);
  RawSplit train = read_npz_split(zip, "x_train", "y_train", options.train_limit);
  RawSplit test = read_npz_split(zip, "x_test", "y_test", options.test_limit);
  return finish(train, test, options, path);
}

Dataset load_npy_dataset(const std::string& samples_path, const std::string& labels_path, int64_t limit,
                         int64_t classes) {
  RawSplit s = read_npy_split(samples_path, labels_path, limit);
  RawSplit none;
  return to_dataset(s, class_count(s, none, classes));
}

DatasetSplits load_dataset(const std::string& path, const DatasetLoadOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_idx_directory(path, options);
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".npz") return load_npz(path, options);
  if (!fs::exists(path, ec))
    throw FormatError(path + ": no such directory or file; give a directory of (Fashion-)MNIST IDX files or an .npz");
  throw FormatError(path + ": not a directory of IDX files nor an .npz file (x_train, y_train, x_test, y_test)");
}

}  // namespace trident
