// IDX (MNIST) file reading: a byte source that is either a plain file or a zlib inflate stream,
// a header parser that checks every size before allocating, and the MNIST directory loader.
#include "trident/core/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "trident/core/error.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw FormatError(path + ": " + problem);
}

std::string hex_byte(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02x", v & 0xFF);
  return buf;
}

// Sequential reader over a raw file or a gzip stream (possibly several concatenated members).
// read() returns fewer bytes than asked only at the true end of the data; every I/O or zlib
// problem is thrown as a FormatError naming the file.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail(path_, "is a directory, not an IDX file");
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) fail(path_, std::string("cannot open IDX file: ") + std::strerror(errno));
    const int b0 = std::fgetc(file_), b1 = std::fgetc(file_);
    gzip_ = b0 == 0x1f && b1 == 0x8b;
    std::rewind(file_);
    if (gzip_) {
      in_.reset(new unsigned char[kChunk]);
      std::memset(&z_, 0, sizeof z_);
      if (inflateInit2(&z_, 15 + 16) != Z_OK) fail(path_, "zlib inflateInit2 failed");  // 16: gzip wrapper
      z_open_ = true;
    }
  }
  ~ByteSource() {
    if (z_open_) inflateEnd(&z_);
    if (file_ != nullptr) std::fclose(file_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool gzip() const { return gzip_; }

  size_t read(uint8_t* dst, size_t n) { return gzip_ ? inflate_into(dst, n) : read_raw(dst, n); }

 private:
  static constexpr size_t kChunk = 1 << 16;

  size_t read_raw(uint8_t* dst, size_t n) {
    const size_t got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_)) fail(path_, std::string("read error: ") + std::strerror(errno));
    return got;
  }

  // Refills the input buffer; false at end of file.
  bool refill() {
    const size_t got = read_raw(in_.get(), kChunk);
    z_.next_in = in_.get();
    z_.avail_in = static_cast<uInt>(got);
    return got > 0;
  }

  size_t inflate_into(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (z_.avail_in == 0 && !refill()) {
        if (stream_end_) return done;  // clean end after a complete member
        fail(path_, "gzip stream is truncated (the file ends inside the compressed data, after " +
                        std::to_string(produced_) + " decompressed bytes)");
      }
      if (stream_end_) {
        // More bytes after a complete member: another member (gzip allows concatenation), or junk.
        if (z_.next_in[0] != 0x1f) fail(path_, "trailing bytes after the end of the gzip stream");
        inflateReset(&z_);
        stream_end_ = false;
      }
      const size_t want = std::min<size_t>(n - done, 1u << 30);
      z_.next_out = dst + done;
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t got = want - z_.avail_out;
      done += got;
      produced_ += got;
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail(path_, std::string("corrupt gzip data (zlib: ") + (z_.msg != nullptr ? z_.msg : zError(rc)) +
                        ") after " + std::to_string(produced_) + " decompressed bytes");
      }
    }
    return done;
  }

  std::string path_;
  std::FILE* file_ = nullptr;
  bool gzip_ = false;
  z_stream z_;
  bool z_open_ = false;
  bool stream_end_ = false;
  uint64_t produced_ = 0;
  std::unique_ptr<unsigned char[]> in_;
};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

const char* idx_type_name(unsigned type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
  }
  return nullptr;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  ByteSource src(path);
  // Header: 00 00 <type> <ndims>, then ndims big-endian uint32 sizes.
  uint8_t head[4];
  const size_t got_head = src.read(head, 4);
  if (got_head < 4) fail(path, "too short for an IDX header (" + std::to_string(got_head) + " bytes)");
  if (head[0] != 0 || head[1] != 0)
    fail(path, "not an IDX file: starts with " + hex_byte(head[0]) + " " + hex_byte(head[1]) + " " +
                   hex_byte(head[2]) + " " + hex_byte(head[3]) + ", expected 00 00 <type> <ndims>");
  if (head[2] != 0x08) {
    const char* name = idx_type_name(head[2]);
    fail(path, name != nullptr ? "unsupported IDX element type 0x" + hex_byte(head[2]) + " (" + name +
                                     "); only unsigned byte (0x08) arrays are supported"
                               : "unknown IDX element type 0x" + hex_byte(head[2]));
  }
  const unsigned ndims = head[3];
  if (ndims == 0) fail(path, "IDX header declares zero dimensions");
  if (ndims > 8) fail(path, "IDX header declares " + std::to_string(ndims) + " dimensions; at most 8 are supported");

  uint8_t raw_dims[4 * 8];
  const size_t got_dims = src.read(raw_dims, 4 * ndims);
  if (got_dims < 4 * ndims)
    fail(path, "truncated IDX header: " + std::to_string(ndims) + " dimension sizes need " +
                   std::to_string(4 * ndims) + " bytes, found " + std::to_string(got_dims));
  IdxArray out;
  bool any_zero = false;
  for (unsigned i = 0; i < ndims; ++i) {
    const uint8_t* p = raw_dims + 4 * i;
    const uint32_t d = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    out.dims.push_back(d);
    any_zero = any_zero || d == 0;
  }
  // Element count, capped before anything is allocated; dims are < 2^32 and the running product
  // stays <= 2^32, so no step can overflow 64 bits.
  uint64_t count = 1;
  for (size_t i = 0; i < out.dims.size() && !any_zero; ++i) {
    count *= static_cast<uint64_t>(out.dims[i]);
    if (count > kIdxMaxBytes)
      fail(path, "IDX dims " + dims_text(out.dims) + " declare more than the 4 GiB limit of this reader");
  }
  if (any_zero) count = 0;
  const uint64_t expected_file = 4 + 4 * uint64_t{ndims} + count;

  if (!src.gzip()) {
    // The file length is known: check it before allocating, so a bogus header costs nothing.
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) fail(path, "cannot determine the file size: " + ec.message());
    if (size != expected_file)
      fail(path, "file is " + std::to_string(size) + " bytes but its IDX header (dims " + dims_text(out.dims) +
                     ") implies " + std::to_string(expected_file) +
                     (size < expected_file ? ": the file is truncated" : ": trailing bytes after the data"));
    out.data.resize(count);
    if (src.read(out.data.data(), count) != count) fail(path, "file shrank while being read");
  } else {
    // Decompressed length is unknown up front: grow in 64 MiB steps so that a bogus header in a
    // small file fails at the real end of the stream instead of allocating the declared size.
    constexpr uint64_t kStep = uint64_t{64} << 20;
    uint64_t have = 0;
    while (have < count) {
      const uint64_t step = std::min(kStep, count - have);
      out.data.resize(have + step);
      const size_t got = src.read(out.data.data() + have, step);
      have += got;
      if (got < step)
        fail(path, "decompressed data ends after " + std::to_string(have) + " of the " + std::to_string(count) +
                       " data bytes its IDX header (dims " + dims_text(out.dims) + ") declares: truncated");
    }
  }
  uint8_t extra;
  if (src.read(&extra, 1) != 0)
    fail(path, std::string(src.gzip() ? "decompressed data continues" : "trailing bytes") + " after the " +
                   std::to_string(count) + " data bytes its IDX header (dims " + dims_text(out.dims) + ") declares");
  return out;
}

namespace {

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

ImageDataset load_split(const std::string& dir, const std::string& prefix, const float (&lut)[256], int classes) {
  const std::string image_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(image_path);
  if (images.dims.size() != 3)
    fail(image_path, "expected image dims [count, height, width], got " + std::to_string(images.dims.size()) +
                         "-d " + dims_text(images.dims));
  if (images.dims[0] == 0 || images.dims[1] == 0 || images.dims[2] == 0)
    fail(image_path, "holds no pixels (dims " + dims_text(images.dims) + ")");
  IdxArray labels = read_idx(label_path);
  if (labels.dims.size() != 1)
    fail(label_path, "expected label dims [count], got " + std::to_string(labels.dims.size()) + "-d " +
                         dims_text(labels.dims));
  if (labels.dims[0] != images.dims[0])
    throw FormatError(image_path + " holds " + std::to_string(images.dims[0]) + " images but " + label_path +
                      " holds " + std::to_string(labels.dims[0]) + " labels");
  const auto max_it = std::max_element(labels.data.begin(), labels.data.end());
  if (*max_it >= classes)
    fail(label_path, "label " + std::to_string(*max_it) + " at index " +
                         std::to_string(max_it - labels.data.begin()) + " is outside 0.." +
                         std::to_string(classes - 1) + " (largest label in the file: " + std::to_string(*max_it) + ")");

  ImageDataset ds;
  ds.count = images.dims[0];
  ds.height = images.dims[1];
  ds.width = images.dims[2];
  ds.images.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), ds.images.begin(), [&](uint8_t v) { return lut[v]; });
  ds.labels.assign(labels.data.begin(), labels.data.end());
  return ds;
}

}  // namespace

MnistSplits load_mnist_directory(const std::string& dir, float mean, float std, int classes) {
  if (!(std > 0.0f)) throw UsageError("load_mnist_directory: std must be > 0, got " + std::to_string(std));
  if (classes < 1 || classes > 256)
    throw UsageError("load_mnist_directory: classes must be in 1..256, got " + std::to_string(classes));
  // Every byte maps to one of 256 floats; a table keeps the 47M-pixel conversion cheap.
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = (static_cast<float>(v) / 255.0f - mean) / std;
  MnistSplits splits;
  splits.directory = dir;
  splits.train = load_split(dir, "train", lut, classes);
  splits.test = load_split(dir, "t10k", lut, classes);
  return splits;
}

std::string default_data_directory() {
  const char* env = std::getenv("TRIDENT_DATA");
  if (env != nullptr && env[0] != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

}  // namespace trident
