// IDX (MNIST) file reading: a header parser that checks every size before allocating, reading
// only the leading items a run uses (raw or gzip), and the legacy float MNIST loader on top of
// the Dataset loader.
#include "trident/core/idx.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "trident/core/byte_source.h"
#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/files.h"

namespace trident {
namespace {


[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw FormatError(path + ": " + problem);
}

std::string hex_byte(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02x", v & 0xFF);
  return buf;
}

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

IdxArray read_idx(const std::string& path) { return read_idx(path, kIdxAllItems); }

IdxArray read_idx(const std::string& path, uint64_t max_items) {
  const InputFile input = open_regular_file(path, "IDX file");
  const bool gzip = starts_with_gzip_magic(input.get());
  ByteSource src(input.get(), path, gzip ? ByteSource::Encoding::gzip : ByteSource::Encoding::stored);
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
  out.declared_items = out.dims[0];
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
  // Only the first `items` entries along dims[0] are read (and allocated).
  const uint64_t items = std::min<uint64_t>(out.dims[0], max_items);
  const uint64_t item_bytes = out.dims[0] == 0 ? 0 : count / static_cast<uint64_t>(out.dims[0]);
  const uint64_t wanted = items * item_bytes;

  if (!gzip) {
    // The file length is known: check it before allocating, so a bogus header costs nothing.
    if (input.size() != expected_file)
      fail(path, "file is " + std::to_string(input.size()) + " bytes but its IDX header (dims " + dims_text(out.dims) +
                     ") implies " + std::to_string(expected_file) +
                     (input.size() < expected_file ? ": the file is truncated" : ": trailing bytes after the data"));
    out.data.resize(wanted);
    if (src.read(out.data.data(), wanted) != wanted) fail(path, "file shrank while being read");
  } else {
    // The decompressed length is unknown up front: the buffer grows with what really arrives, so
    // a bogus header in a small file fails at the real end of the stream without allocating the
    // declared size, and only the items used are ever inflated.
    const uint64_t got = src.read_into(out.data, wanted);
    if (got < wanted)
      fail(path, "decompressed data ends after " + std::to_string(got) + " of the " + std::to_string(count) +
                     " data bytes its IDX header (dims " + dims_text(out.dims) + ") declares: truncated");
  }
  out.dims[0] = static_cast<int64_t>(items);
  // A gzip file read in part is not inflated further: its tail is never checked (nor paid for).
  if (items == static_cast<uint64_t>(out.declared_items) && src.has_more())
    fail(path, std::string(gzip ? "decompressed data continues" : "trailing bytes") + " after the " +
                   std::to_string(count) + " data bytes its IDX header (dims " + dims_text(out.dims) + ") declares");
  return out;
}

MnistSplits load_mnist_directory(const std::string& dir, float mean, float std, int classes, int64_t train_limit,
                                 int64_t test_limit) {
  if (!(std > 0.0f)) throw UsageError("load_mnist_directory: std must be > 0, got " + std::to_string(std));
  if (classes < 1 || classes > 256)
    throw UsageError("load_mnist_directory: classes must be in 1..256, got " + std::to_string(classes));
  DatasetLoadOptions options;
  options.train_limit = train_limit;
  options.test_limit = test_limit;
  options.classes = classes;
  DatasetSplits loaded = load_idx_directory(dir, options);
  MnistSplits splits;
  splits.directory = dir;
  for (auto [from, to] : {std::pair<Dataset*, ImageDataset*>{&loaded.train, &splits.train},
                          std::pair<Dataset*, ImageDataset*>{&loaded.test, &splits.test}}) {
    const std::vector<int64_t>& shape = from->sample_shape();  // [C, H, W]
    if (shape.size() != 3 || shape[0] != 1)
      throw FormatError(from->source() + ": the float MNIST loader takes one-channel images, got samples of " +
                        std::to_string(shape[0]) + " channels");
    from->set_normalization({true, {mean}, {std}});
    to->count = from->size();
    to->height = shape[1];
    to->width = shape[2];
    to->images = from->normalized(0, from->size());
    to->labels = from->labels();
  }
  return splits;
}

std::string default_data_directory() {
  const char* env = std::getenv("TRIDENT_DATA");
  if (env != nullptr && env[0] != '\0') return env;
  return kFashionMnistDirectory;
}

}  // namespace trident
