// Tests of the IDX reader and MNIST loader: exact round trips, every malformed-file error, and the real data set.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/idx.h"

namespace fs = std::filesystem;
using trident::FormatError;
using Bytes = std::vector<uint8_t>;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("trident-idx-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// An unsigned-byte IDX image: 00 00 08 ndims, big-endian dims, then data.
Bytes make_idx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// gzip-wrapped deflate of bytes (windowBits 15 + 16 selects the gzip container).
Bytes gzip(const Bytes& in) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&z, in.size()) + 32);
  z.next_in = const_cast<Bytes::value_type*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

// Writes bytes as `name` in dir and returns read_idx's error message (fails the test if none).
std::string idx_error(const TempDir& dir, const std::string& name, const Bytes& bytes) {
  const std::string path = dir.file(name);
  write_file(path, bytes);
  try {
    trident::read_idx(path);
  } catch (const FormatError& e) {
    CHECK_THAT(e.what(), Catch::Contains(name));
    return e.what();
  }
  FAIL("read_idx accepted malformed file " << name);
  return "";
}

}  // namespace

TEST_CASE("idx reads raw and gzip files exactly", "[idx]") {
  TempDir dir;
  const Bytes data = iota_bytes(2 * 3 * 4);
  const Bytes file = make_idx({2, 3, 4}, data);
  write_file(dir.file("a-raw"), file);
  write_file(dir.file("a.gz"), gzip(file));
  write_file(dir.file("gz-without-suffix"), gzip(file));  // detected by magic, not by name
  write_file(dir.file("raw-with-suffix.gz"), file);
  Bytes two_members = gzip(Bytes(file.begin(), file.begin() + 10));  // gzip allows concatenation
  const Bytes rest = gzip(Bytes(file.begin() + 10, file.end()));
  two_members.insert(two_members.end(), rest.begin(), rest.end());
  write_file(dir.file("two-members.gz"), two_members);
  for (const char* name : {"a-raw", "a.gz", "gz-without-suffix", "raw-with-suffix.gz", "two-members.gz"}) {
    INFO(name);
    const trident::IdxArray a = trident::read_idx(dir.file(name));
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    CHECK(a.data == data);
  }
  // A 1-d label file and an array with a zero dimension.
  write_file(dir.file("labels"), make_idx({5}, {0, 1, 2, 3, 9}));
  CHECK(trident::read_idx(dir.file("labels")).data == Bytes{0, 1, 2, 3, 9});
  write_file(dir.file("empty.gz"), gzip(make_idx({0, 28, 28}, {})));
  const trident::IdxArray empty = trident::read_idx(dir.file("empty.gz"));
  CHECK(empty.dims == std::vector<int64_t>{0, 28, 28});
  CHECK(empty.data.empty());
}

TEST_CASE("idx malformed files raise FormatError naming the file and the problem", "[idx]") {
  TempDir dir;
  const Bytes good = make_idx({4, 4}, iota_bytes(16));
  const auto has = [](const std::string& message, const char* part) { CHECK_THAT(message, Catch::Contains(part)); };

  CHECK_THROWS_WITH(trident::read_idx(dir.file("no-such-file")),
                    Catch::Contains("no-such-file") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(trident::read_idx(dir.path.string()), Catch::Contains("is a directory"));
  has(idx_error(dir, "short", {0, 0}), "too short");
  has(idx_error(dir, "magic", {1, 2, 8, 1, 0, 0, 0, 1, 5}), "not an IDX file");
  has(idx_error(dir, "float-type", make_idx({1}, {0, 0, 0, 0}, 0x0D)), "unsupported IDX element type 0x0d (float32)");
  has(idx_error(dir, "unknown-type", make_idx({1}, {0}, 0x42)), "unknown IDX element type 0x42");
  has(idx_error(dir, "zero-dims", {0, 0, 8, 0}), "zero dimensions");
  has(idx_error(dir, "nine-dims", make_idx({1, 1, 1, 1, 1, 1, 1, 1, 1}, {7})), "at most 8");
  has(idx_error(dir, "header-cut", Bytes(good.begin(), good.begin() + 6)), "truncated IDX header");
  has(idx_error(dir, "truncated", Bytes(good.begin(), good.end() - 1)), "the file is truncated");
  Bytes trailing = good;
  trailing.push_back(0);
  has(idx_error(dir, "trailing", trailing), "trailing bytes");
  // Dims whose product passes 4 GiB are refused from the header alone, raw or compressed.
  has(idx_error(dir, "huge", make_idx({65536, 65536, 2}, {})), "4 GiB limit");
  has(idx_error(dir, "huge.gz", gzip(make_idx({0xFFFFFFFFu, 0xFFFFFFFFu}, {}))), "4 GiB limit");
  // A small gzip file claiming 2 GiB: fails at the real end of the stream (memory grows in steps).
  has(idx_error(dir, "bogus-dims.gz", gzip(make_idx({1u << 30, 2}, iota_bytes(100)))), "truncated");

  const Bytes gz = gzip(good);
  has(idx_error(dir, "gz-data-short.gz", gzip(Bytes(good.begin(), good.end() - 3))), "decompressed data ends after 13");
  has(idx_error(dir, "gz-data-long.gz", gzip(trailing)), "decompressed data continues");
  has(idx_error(dir, "gz-cut.gz", Bytes(gz.begin(), gz.begin() + gz.size() / 2)), "gzip stream is truncated");
  has(idx_error(dir, "gz-no-trailer.gz", Bytes(gz.begin(), gz.end() - 4)), "gzip stream is truncated");
  Bytes bad_block = gz;
  bad_block[10] = 0xFF;  // first deflate byte: BFINAL=1, BTYPE=11 (reserved)
  has(idx_error(dir, "gz-corrupt.gz", bad_block), "corrupt gzip data (zlib: invalid block type)");
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0x55;  // CRC32 in the trailer
  has(idx_error(dir, "gz-crc.gz", bad_crc), "corrupt gzip data (zlib: incorrect data check)");
  Bytes junk = gz;
  junk.push_back('x');
  has(idx_error(dir, "gz-junk.gz", junk), "trailing bytes after the end of the gzip stream");
}

TEST_CASE("idx mnist directory loader normalizes and validates", "[idx]") {
  TempDir dir;
  // Train as raw files, test as .gz: either name form is accepted per file.
  const Bytes train_pixels = {0, 255, 51, 102, 0, 0, 0, 0, 1, 2, 3, 4};  // 3 images of 2x2
  write_file(dir.file("train-images-idx3-ubyte"), make_idx({3, 2, 2}, train_pixels));
  write_file(dir.file("train-labels-idx1-ubyte"), make_idx({3}, {9, 0, 4}));
  write_file(dir.file("t10k-images-idx3-ubyte.gz"), gzip(make_idx({1, 2, 2}, {10, 20, 30, 40})));
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(make_idx({1}, {7})));

  const trident::MnistSplits s = trident::load_mnist_directory(dir.path.string());
  CHECK(s.directory == dir.path.string());
  CHECK(s.train.count == 3);
  CHECK(s.train.height == 2);
  CHECK(s.train.width == 2);
  REQUIRE(s.train.images.size() == 12);
  for (size_t i = 0; i < train_pixels.size(); ++i)
    CHECK(s.train.images[i] == Approx((train_pixels[i] / 255.0 - 0.1307) / 0.3081).epsilon(1e-6));
  CHECK(s.train.labels == std::vector<int32_t>{9, 0, 4});
  CHECK(s.test.count == 1);
  CHECK(s.test.labels == std::vector<int32_t>{7});
  const trident::MnistSplits plain = trident::load_mnist_directory(dir.path.string(), 0.0f, 1.0f);
  CHECK(plain.train.images[1] == Approx(1.0f));
  CHECK(plain.test.images[3] == Approx(40.0f / 255.0f));

  CHECK_THROWS_AS(trident::load_mnist_directory(dir.path.string(), 0.5f, 0.0f), trident::UsageError);
  CHECK_THROWS_AS(trident::load_mnist_directory(dir.path.string(), 0.5f, 1.0f, 0), trident::UsageError);

  SECTION("label out of range, and a larger class count accepts it") {
    write_file(dir.file("train-labels-idx1-ubyte"), make_idx({3}, {9, 12, 4}));
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.path.string()),
                      Catch::Contains("train-labels-idx1-ubyte") && Catch::Contains("label 12 at index 1 is outside 0..9"));
    CHECK(trident::load_mnist_directory(dir.path.string(), 0.1307f, 0.3081f, 13).train.labels[1] == 12);
  }
  SECTION("image and label counts differ") {
    write_file(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(make_idx({2}, {7, 7})));
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.path.string()),
                      Catch::Contains("t10k-images-idx3-ubyte.gz holds 1 images") &&
                          Catch::Contains("t10k-labels-idx1-ubyte.gz holds 2 labels"));
  }
  SECTION("images that are not 3-d") {
    write_file(dir.file("train-images-idx3-ubyte"), make_idx({3, 4}, train_pixels));
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.path.string()),
                      Catch::Contains("train-images-idx3-ubyte") && Catch::Contains("got 2-d 3x4"));
  }
  SECTION("a missing file lists both names tried and suggests --data") {
    fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.path.string()),
                      Catch::Contains("t10k-labels-idx1-ubyte and") && Catch::Contains("t10k-labels-idx1-ubyte.gz") &&
                          Catch::Contains("--data"));
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.file("nowhere")),
                      Catch::Contains("the directory does not exist") && Catch::Contains("--data"));
  }
  SECTION("a malformed member file is reported by its own name") {
    write_file(dir.file("t10k-images-idx3-ubyte.gz"), Bytes{0x1f, 0x8b, 8, 0});
    CHECK_THROWS_WITH(trident::load_mnist_directory(dir.path.string()),
                      Catch::Contains("t10k-images-idx3-ubyte.gz") && Catch::Contains("gzip"));
  }
}

#ifndef _WIN32
TEST_CASE("idx default data directory honours TRIDENT_DATA", "[idx]") {
  const char* old = std::getenv("TRIDENT_DATA");
  const std::string saved = old != nullptr ? old : "";
  setenv("TRIDENT_DATA", "/some/where", 1);
  CHECK(trident::default_data_directory() == "/some/where");
  unsetenv("TRIDENT_DATA");
  CHECK(trident::default_data_directory() == "/usr/share/datasets/fashion-mnist");
  if (old != nullptr) setenv("TRIDENT_DATA", saved.c_str(), 1);
}
#endif

TEST_CASE("idx loads the installed Fashion-MNIST", "[idx][data]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    WARN("skipped: " << dir << " does not exist");
    SUCCEED();
    return;
  }
  // Fashion-MNIST's own pixel statistics: normalizing with them should give mean ~0, std ~1.
  const float mean = 0.2860f, std = 0.3530f;
  const trident::MnistSplits s = trident::load_mnist_directory(dir, mean, std);
  for (const trident::ImageDataset* ds : {&s.train, &s.test}) {
    const int64_t expected = ds == &s.train ? 60000 : 10000;
    CHECK(ds->count == expected);
    CHECK(ds->height == 28);
    CHECK(ds->width == 28);
    REQUIRE(ds->images.size() == static_cast<size_t>(expected * 28 * 28));
    REQUIRE(ds->labels.size() == static_cast<size_t>(expected));
    std::vector<int64_t> per_class(10, 0);
    CHECK(*std::min_element(ds->labels.begin(), ds->labels.end()) == 0);
    REQUIRE(*std::max_element(ds->labels.begin(), ds->labels.end()) == 9);
    for (int32_t l : ds->labels) ++per_class[l];
    for (int64_t n : per_class) CHECK(n == expected / 10);  // the splits are balanced
    double sum = 0, sum2 = 0;
    for (float v : ds->images) {
      sum += v;
      sum2 += double(v) * v;
    }
    const double m = sum / static_cast<double>(ds->images.size());
    const double sd = std::sqrt(sum2 / static_cast<double>(ds->images.size()) - m * m);
    CHECK(std::abs(m) < 0.01);
    CHECK(std::abs(sd - 1.0) < 0.02);
    // Pixels map exactly onto the 256 values (v/255 - mean)/std.
    CHECK(*std::min_element(ds->images.begin(), ds->images.end()) == Approx(-mean / std));
    CHECK(*std::max_element(ds->images.begin(), ds->images.end()) == Approx((1 - mean) / std));
  }
}
