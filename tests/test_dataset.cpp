// Tests of the Dataset value and its loaders: storage kept as loaded, normalization, the IDX
// directory, .npy and .npz readers (limits applied while reading, every dimension cross-checked,
// malformed files named), and numpy's own files when numpy is installed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "trident/core/byte_source.h"
#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/finite.h"
#include "trident/core/idx.h"
#include "trident/core/npy.h"
#include "tests/test_files.h"

using namespace trident;
using namespace trident::testing;
using Catch::Contains;

namespace {

// The message of the FormatError that `work` throws (fails the test if there is none).
template <typename F>
std::string format_error(F&& work) {
  try {
    work();
  } catch (const FormatError& e) {
    return e.what();
  }
  FAIL("no FormatError");
  return "";
}

// A small .npz in Keras' layout: x_* of shape (n, 2, 3) uint8 = i, y_* int64 = i % 4.
Bytes keras_npz(int n_train, int n_test, bool deflate) {
  std::vector<ZipMember> members;
  for (const auto& [split, n] : {std::pair<std::string, int>{"train", n_train}, {"test", n_test}}) {
    Bytes x(static_cast<size_t>(n) * 6);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 4;
    members.push_back({"x_" + split + ".npy", npy_bytes("|u1", "(" + std::to_string(n) + ", 2, 3)", x), deflate});
    members.push_back({"y_" + split + ".npy", npy_bytes("<i8", "(" + std::to_string(n) + ",)", le_bytes(y)), deflate});
  }
  return zip_bytes(members);
}

}  // namespace

TEST_CASE("first_non_finite: the first infinity or NaN of a float array, at any position and "
          "alignment", "[dataset]") {
  // 3000 values: three blocks of the scan (1024 each), the last one partial.
  std::vector<float> v(3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 7 == 0 ? -1.0f : 1.0f) * float(i) * 1e-3f;
  v[1] = std::numeric_limits<float>::max();       // finite extremes stay finite
  v[2] = -std::numeric_limits<float>::max();
  v[3] = std::numeric_limits<float>::denorm_min();
  v[4] = -0.0f;
  CHECK(trident::first_non_finite(v.data(), int64_t(v.size())) == -1);
  CHECK(trident::first_non_finite(v.data(), 0) == -1);
  for (const float bad : {NAN, -NAN, INFINITY, -INFINITY}) {
    for (const int64_t at : {0, 1023, 1024, 2047, 2999}) {
      std::vector<float> w = v;
      w[size_t(at)] = bad;
      w[2999 - size_t(at) / 2] = bad;  // a later one too (the first is reported)
      CHECK(trident::first_non_finite(w.data(), int64_t(w.size())) ==
            std::min<int64_t>(at, 2999 - at / 2));
      CHECK(trident::first_non_finite(w.data(), at) == (2999 - at / 2 < at ? 2999 - at / 2 : -1));
    }
  }
  // Bytes at an odd address (a .npy payload after its header): read without alignment.
  std::vector<unsigned char> bytes(1 + 4 * 100, 0);
  const float inf = INFINITY;
  std::memcpy(bytes.data() + 1 + 4 * 57, &inf, 4);
  CHECK(trident::first_non_finite(bytes.data() + 1, 100) == 57);
}

TEST_CASE("dataset: memory the application owns, kept as uint8 or float32", "[dataset]") {
  std::vector<uint8_t> bytes(3 * 2 * 2 * 2);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 10);
  const Dataset d(bytes, {2, 2, 2}, {0, 4, 1});
  CHECK(d.size() == 3);
  CHECK(d.dtype() == DType::u8);
  CHECK(d.sample_bytes() == 8);  // one byte per value: never widened on load
  CHECK(d.channels() == 2);
  CHECK(d.classes() == 5);       // the largest label + 1
  CHECK(d.normalization().divide_by_255);
  CHECK(std::memcmp(d.uint8_data(), bytes.data(), bytes.size()) == 0);
  CHECK(d.float_data() == nullptr);
  const Dataset first = d.head(2);
  CHECK(first.size() == 2);
  CHECK(first.data() == d.data());  // shares the storage
  CHECK(d.head(99).size() == 3);

  // Per channel: (x / 255 - mean[c]) / std[c], the same float operations a device performs.
  Dataset n = d;
  n.set_normalization({true, {0.5f, 0.25f}, {2.0f, 0.5f}});
  const std::vector<float> v = n.normalized(1, 2);
  REQUIRE(v.size() == 16);
  for (size_t s = 0; s < 2; ++s)
    for (size_t c = 0; c < 2; ++c)
      for (size_t i = 0; i < 4; ++i) {
        const float x = bytes[(1 + s) * 8 + c * 4 + i];
        const float expected = (x / 255.0f - (c ? 0.25f : 0.5f)) / (c ? 0.5f : 2.0f);
        CHECK(v[s * 8 + c * 4 + i] == expected);
      }
  CHECK_THROWS_AS(n.set_normalization({true, {0.1f, 0.2f, 0.3f}, {}}), UsageError);
  CHECK_THROWS_AS(n.set_normalization({true, {}, {0.0f}}), UsageError);
  CHECK_THROWS_AS(n.set_normalization({true, {NAN}, {}}), UsageError);
  CHECK_THROWS_AS(n.normalized(2, 2), UsageError);

  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 4.0f};
  const int32_t labels[] = {1, 0};
  const Dataset f = Dataset::from_memory(values.data(), 2, {2}, labels, 3);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.classes() == 3);
  CHECK(f.channels() == 1);
  CHECK_FALSE(f.normalization().divide_by_255);
  CHECK(f.normalized(0, 2) == values);

  CHECK_THROWS_AS(Dataset(bytes, {2, 2, 2}, {0, 1}), ShapeError);      // 24 values, 2 samples of 8
  CHECK_THROWS_AS(Dataset(bytes, {2, 2, 2}, {0, -1, 2}), UsageError);  // negative label
  CHECK_THROWS_AS(Dataset(bytes, {2, 2, 2}, {0, 5, 2}, 5), UsageError);
  CHECK_THROWS_AS(Dataset(std::vector<float>{1.0f, NAN}, {1}, {0, 0}), UsageError);
  CHECK_THROWS_AS(Dataset(bytes, {}, {0}), ShapeError);
  CHECK(std::string(kFashionMnistClassNames[0]) == "T-shirt/top");
  CHECK(std::string(kFashionMnistClassNames[9]) == "Ankle boot");
}

TEST_CASE("dataset: IDX directory, limits applied while reading, every file checked against the others",
          "[dataset][idx]") {
  ScratchDir dir("dataset-idx");
  write_mnist_directory(dir.path.string(), 300, 50, 28, 28, /*gzip=*/true);
  DatasetLoadOptions limited;
  limited.train_limit = 120;
  limited.test_limit = 7;
  const DatasetSplits s = load_idx_directory(dir.path.string(), limited);
  CHECK(s.train.size() == 120);
  CHECK(s.test.size() == 7);
  CHECK(s.train.sample_shape() == std::vector<int64_t>{1, 28, 28});
  CHECK(s.train.dtype() == DType::u8);
  CHECK(s.train.classes() == 10);
  CHECK_THAT(s.train.source(), Contains("train-images-idx3-ubyte.gz"));
  const DatasetSplits all = load_idx_directory(dir.path.string());
  CHECK(all.train.size() == 300);
  CHECK(std::memcmp(all.train.uint8_data(), s.train.uint8_data(), 120 * 784) == 0);
  CHECK(std::vector<int32_t>(all.train.labels().begin(), all.train.labels().begin() + 120) == s.train.labels());

  // The legacy float loader with a limit is bit-identical to the prefix of a full load.
  const MnistSplits full = load_mnist_directory(dir.path.string());
  const MnistSplits part = load_mnist_directory(dir.path.string(), 0.1307f, 0.3081f, 10, 120, 7);
  CHECK(part.train.count == 120);
  CHECK(part.train.images.size() == 120 * 784);
  CHECK(std::equal(part.train.images.begin(), part.train.images.end(), full.train.images.begin()));

  SECTION("a given class count is checked against both splits, naming the file") {
    limited.classes = 5;
    CHECK_THAT(format_error([&] { load_idx_directory(dir.path.string(), limited); }),
               Contains("train-labels-idx1-ubyte.gz") && Contains("outside 0..4"));
  }
  SECTION("test samples of another shape name the test file and both shapes") {
    write_bytes(dir.file("t10k-images-idx3-ubyte.gz"), deflate_bytes(idx_bytes({50, 14, 56}, Bytes(50 * 784))));
    CHECK_THAT(format_error([&] { load_idx_directory(dir.path.string(), limited); }),
               Contains("t10k-images-idx3-ubyte.gz") && Contains("1x14x56") && Contains("1x28x28"));
  }
  SECTION("images and labels of different counts are caught even when a limit reads fewer") {
    write_bytes(dir.file("t10k-labels-idx1-ubyte.gz"), deflate_bytes(idx_bytes({49}, Bytes(49, 1))));
    CHECK_THAT(format_error([&] { load_idx_directory(dir.path.string(), limited); }),
               Contains("t10k-images-idx3-ubyte.gz holds 50 images") && Contains("holds 49 labels"));
  }
  SECTION("N x C x H x W images keep their channels") {
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), deflate_bytes(idx_bytes({300, 3, 4, 5}, Bytes(300 * 60, 9))));
    write_bytes(dir.file("t10k-images-idx3-ubyte.gz"), deflate_bytes(idx_bytes({50, 3, 4, 5}, Bytes(50 * 60, 9))));
    const DatasetSplits c = load_idx_directory(dir.path.string(), limited);
    CHECK(c.train.sample_shape() == std::vector<int64_t>{3, 4, 5});
    CHECK(c.train.channels() == 3);
  }
}

TEST_CASE("dataset: a gzip IDX file is inflated only as far as the samples used", "[dataset][idx]") {
  ScratchDir dir("dataset-bomb");
  // Header and 10 images, then 100 more (zeros), then bytes that are not deflate data at all. A
  // read of the first 10 images stops inside the next 100 and never reaches the junk; a read of
  // everything fails on it.
  const Bytes head = idx_bytes({1369568, 28, 28}, Bytes(10 * 784, 5));
  const Bytes more(100 * 784, 0);
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes gz(deflateBound(&z, head.size() + more.size()) + 64);
  z.next_out = gz.data();
  z.avail_out = static_cast<uInt>(gz.size());
  for (const Bytes* part : {&head, &more}) {
    z.next_in = const_cast<uint8_t*>(part->data());
    z.avail_in = static_cast<uInt>(part->size());
    REQUIRE(deflate(&z, Z_FULL_FLUSH) == Z_OK);
  }
  gz.resize(z.total_out);
  deflateEnd(&z);
  gz.insert(gz.end(), 4096, 0xFF);  // an invalid block type wherever the decoder would look
  const std::string path = dir.file("images.gz");
  write_bytes(path, gz);
  const IdxArray a = read_idx(path, 10);
  CHECK(a.dims == std::vector<int64_t>{10, 28, 28});
  CHECK(a.declared_items == 1369568);
  CHECK(a.data == Bytes(10 * 784, 5));
  // Never allocated what the header declares (1 GB): at most twice what arrived.
  CHECK(a.data.capacity() <= 2 * 10 * 784 + 65536);
  CHECK_THAT(format_error([&] { read_idx(path); }), Contains("images.gz") && Contains("corrupt gzip data"));
}

TEST_CASE("dataset: .npy samples and labels, every dtype rule and malformed header named", "[dataset][npy]") {
  ScratchDir dir("dataset-npy");
  const std::vector<float> x = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 4.5f, 5.0f, 5.5f};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(3, 2, 2)", le_bytes(x)));
  write_bytes(dir.file("y.npy"), npy_bytes("<i2", "(3,)", le_bytes(std::vector<int16_t>{2, 0, 7})));
  const Dataset d = load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"));
  CHECK(d.dtype() == DType::f32);
  CHECK(d.sample_shape() == std::vector<int64_t>{1, 2, 2});
  CHECK(d.labels() == std::vector<int32_t>{2, 0, 7});
  CHECK(d.classes() == 8);
  CHECK(std::memcmp(d.float_data(), x.data(), x.size() * 4) == 0);
  CHECK(load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"), 2).size() == 2);

  // Version 2 headers, Python 2 longs, unsigned and 64-bit labels, N x D samples.
  write_bytes(dir.file("x2.npy"), npy_bytes("|u1", "(2L, 3L)", {1, 2, 3, 4, 5, 6}, 2));
  write_bytes(dir.file("y2.npy"), npy_bytes("<u8", "(2,)", le_bytes(std::vector<uint64_t>{1, 0})));
  const Dataset v2 = load_npy_dataset(dir.file("x2.npy"), dir.file("y2.npy"));
  CHECK(v2.sample_shape() == std::vector<int64_t>{3});
  CHECK(v2.labels() == std::vector<int32_t>{1, 0});

  const auto error_of = [&](const Bytes& samples, const Bytes& labels) {
    write_bytes(dir.file("bad-x.npy"), samples);
    write_bytes(dir.file("bad-y.npy"), labels);
    return format_error([&] { load_npy_dataset(dir.file("bad-x.npy"), dir.file("bad-y.npy")); });
  };
  const Bytes good_x = npy_bytes("|u1", "(2, 2)", {1, 2, 3, 4});
  const Bytes good_y = npy_bytes("<i8", "(2,)", le_bytes(std::vector<int64_t>{0, 1}));
  CHECK_THAT(error_of(npy_bytes("|u1", "(2, 2)", {1, 2, 3, 4}, 1, "True"), good_y),
             Contains("bad-x.npy") && Contains("fortran_order is True"));
  CHECK_THAT(error_of(npy_bytes(">f4", "(2, 1)", Bytes(8)), good_y), Contains("big-endian"));
  CHECK_THAT(error_of(npy_bytes("<f8", "(2, 1)", Bytes(16)), good_y), Contains("'<f8'") && Contains("float32"));
  CHECK_THAT(error_of(npy_bytes("<f4", "(2, 1)", le_bytes(std::vector<float>{1.0f, NAN})), good_y),
             Contains("value 0 of sample 1 is NaN"));
  CHECK_THAT(error_of(good_x, npy_bytes("<i8", "(2,)", le_bytes(std::vector<int64_t>{0, -3}))),
             Contains("bad-y.npy") && Contains("label -3 at index 1"));
  CHECK_THAT(error_of(good_x, npy_bytes("<i8", "(2,)", le_bytes(std::vector<int64_t>{0, int64_t{1} << 33}))),
             Contains("label 8589934592 at index 1"));
  CHECK_THAT(error_of(good_x, npy_bytes("<f4", "(2,)", Bytes(8))), Contains("not integers"));
  CHECK_THAT(error_of(good_x, npy_bytes("<i8", "(2, 1)", Bytes(16))), Contains("labels need shape (N,)"));
  CHECK_THAT(error_of(good_x, npy_bytes("<i8", "(3,)", Bytes(24))), Contains("holds 2 samples") && Contains("3 labels"));
  CHECK_THAT(error_of(npy_bytes("|u1", "(2, 2)", {1, 2, 3}), good_y), Contains("truncated"));
  CHECK_THAT(error_of(npy_bytes("|u1", "(2, 2)", {1, 2, 3, 4, 5}), good_y), Contains("trailing bytes"));
  CHECK_THAT(error_of(npy_bytes("|u1", "(4294967296, 4294967296)", {}), good_y), Contains("more than 64 GiB"));
  CHECK_THAT(error_of(npy_bytes("|u1", "(2, -2)", {}), good_y), Contains("non-negative integers"));
  CHECK_THAT(error_of(npy_bytes("[('a', '<f4')]", "(2,)", {}), good_y), Contains("header"));
  CHECK_THAT(error_of(Bytes{'P', 'K', 3, 4}, good_y), Contains("not a .npy array"));
  Bytes extra_key = npy_bytes("|u1", "(2, 2)", {1, 2, 3, 4});
  const std::string header(extra_key.begin(), extra_key.end());
  const size_t at = header.find("'shape'");
  extra_key[at + 1] = 'x';  // 'xhape'
  CHECK_THAT(error_of(extra_key, good_y), Contains("unexpected header key 'xhape'"));
}

TEST_CASE("dataset: .npz as Keras writes it, stored or deflated, read only as far as the limit",
          "[dataset][npz]") {
  ScratchDir dir("dataset-npz");
  for (const bool deflate : {false, true}) {
    INFO("deflate " << deflate);
    const std::string path = dir.file(deflate ? "deflated.npz" : "stored.npz");
    write_bytes(path, keras_npz(20, 5, deflate));
    const DatasetSplits s = load_dataset(path);
    CHECK(s.train.size() == 20);
    CHECK(s.test.size() == 5);
    CHECK(s.train.sample_shape() == std::vector<int64_t>{1, 2, 3});
    CHECK(s.train.classes() == 4);
    CHECK(s.test.labels() == std::vector<int32_t>{0, 1, 2, 3, 0});
    CHECK(s.train.uint8_data()[7] == 7);
    CHECK_THAT(s.train.source(), Contains("x_train.npy"));
    DatasetLoadOptions o;
    o.train_limit = 3;
    CHECK(load_npz(path, o).train.size() == 3);
  }
  // Entries missing, a corrupt CRC, a truncated archive, a file that is not a zip.
  write_bytes(dir.file("missing.npz"), zip_bytes({{"x_train.npy", npy_bytes("|u1", "(1, 1)", {0})}}));
  CHECK_THAT(format_error([&] { load_npz(dir.file("missing.npz")); }),
             Contains("no entry y_train.npy") && Contains("holds: x_train.npy"));
  Bytes bad_crc = keras_npz(4, 2, false);
  bad_crc[30 + 11 + 128 + 3] ^= 1;  // a data byte of x_train (after its local header and .npy header)
  write_bytes(dir.file("crc.npz"), bad_crc);
  CHECK_THAT(format_error([&] { load_npz(dir.file("crc.npz")); }), Contains("x_train.npy") && Contains("CRC-32"));
  const Bytes whole = keras_npz(4, 2, true);
  write_bytes(dir.file("cut.npz"), Bytes(whole.begin(), whole.begin() + static_cast<long>(whole.size() / 2)));
  CHECK_THAT(format_error([&] { load_npz(dir.file("cut.npz")); }), Contains("cut.npz"));
  write_bytes(dir.file("text.npz"), Bytes(100, 'a'));
  CHECK_THAT(format_error([&] { load_npz(dir.file("text.npz")); }), Contains("not a zip archive"));
  CHECK_THAT(format_error([&] { load_dataset(dir.file("nothing.csv")); }), Contains("no such directory or file"));
  write_bytes(dir.file("data.csv"), Bytes(10, 'a'));
  CHECK_THAT(format_error([&] { load_dataset(dir.file("data.csv")); }), Contains("nor an .npz"));

  // Deflated samples whose header and zip directory both declare 2^26 rows (1 GiB) over a few
  // KB of data: a limited read allocates only what it reads; a full one fails at the real end.
  std::vector<ZipMember> bomb = {
      {"x_train.npy", npy_bytes("|u1", "(67108864, 16)", Bytes(16 * 1000, 1)), true, uint64_t{1} << 30},
      {"y_train.npy", npy_bytes("|u1", "(67108864,)", Bytes(1000, 1)), true, uint64_t{1} << 26},
      {"x_test.npy", npy_bytes("|u1", "(1, 16)", Bytes(16, 1)), true},
      {"y_test.npy", npy_bytes("|u1", "(1,)", {1}), true}};
  for (ZipMember& m : bomb)  // the directory's size includes the .npy header
    if (m.declared_size) m.declared_size += m.data.size() - (m.name[0] == 'x' ? 16 * 1000 : 1000);
  write_bytes(dir.file("bomb.npz"), zip_bytes(bomb));
  DatasetLoadOptions few;
  few.train_limit = 100;
  const DatasetSplits b = load_npz(dir.file("bomb.npz"), few);
  CHECK(b.train.size() == 100);
  CHECK_THAT(format_error([&] { load_npz(dir.file("bomb.npz")); }), Contains("x_train.npy") && Contains("truncated"));
}

TEST_CASE("dataset: numpy's own .npy and .npz files load value for value", "[dataset][npz]") {
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"})
    if (python.empty() && std::system((std::string(candidate) + " -c 'import numpy' > /dev/null 2>&1").c_str()) == 0)
      python = candidate;
  if (python.empty()) {
    WARN("SKIPPED: python3 with numpy is not installed");
    return;
  }
  ScratchDir dir("dataset-numpy");
  const std::string script =
      "import numpy as np\n"
      "x = (np.arange(5 * 3 * 4) % 251).astype(np.uint8).reshape(5, 3, 4)\n"
      "y = np.array([3, 1, 4, 1, 5], dtype=np.int64)\n"
      "xt = np.linspace(-1, 1, 2 * 2 * 3 * 4, dtype=np.float32).reshape(2, 2, 3, 4)\n"
      "yt = np.array([9, 2], dtype=np.uint8)\n"
      "np.savez('" + dir.file("plain.npz") + "', x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])\n"
      "np.savez_compressed('" + dir.file("packed.npz") + "', x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])\n"
      "np.save('" + dir.file("xt.npy") + "', xt)\n"
      "np.save('" + dir.file("yt.npy") + "', yt)\n"
      "np.save('" + dir.file("fortran.npy") + "', np.asfortranarray(xt))\n";
  write_bytes(dir.file("make.py"), Bytes(script.begin(), script.end()));
  REQUIRE(std::system((python + " " + dir.file("make.py")).c_str()) == 0);
  for (const char* name : {"plain.npz", "packed.npz"}) {
    INFO(name);
    const DatasetSplits s = load_npz(dir.file(name));
    CHECK(s.train.sample_shape() == std::vector<int64_t>{1, 3, 4});
    CHECK(s.train.labels() == std::vector<int32_t>{3, 1, 4, 1, 5});
    CHECK(s.train.classes() == 6);
    for (int i = 0; i < 60; ++i) CHECK(s.train.uint8_data()[i] == i % 251);
    CHECK(s.test.size() == 2);
  }
  const Dataset t = load_npy_dataset(dir.file("xt.npy"), dir.file("yt.npy"));
  CHECK(t.sample_shape() == std::vector<int64_t>{2, 3, 4});
  CHECK(t.float_data()[0] == -1.0f);
  CHECK(t.float_data()[47] == 1.0f);
  CHECK(t.labels() == std::vector<int32_t>{9, 2});
  CHECK_THAT(format_error([&] { load_npy(dir.file("fortran.npy")); }), Contains("fortran_order is True"));
}

TEST_CASE("dataset: the installed Fashion-MNIST loads as 1-byte samples", "[dataset][data]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    WARN("SKIPPED: " << dir << " does not exist");
    return;
  }
  DatasetLoadOptions o;
  o.train_limit = 1000;
  const DatasetSplits s = load_dataset(dir, o);
  CHECK(s.train.size() == 1000);
  CHECK(s.test.size() == 10000);
  CHECK(s.train.sample_shape() == std::vector<int64_t>{1, 28, 28});
  CHECK(s.train.sample_bytes() == 784);
  CHECK(s.test.classes() == 10);
}

TEST_CASE("dataset: trident train --data FILE.npz", "[dataset][npz][cli]") {
  ScratchDir dir("dataset-cli");
  std::vector<ZipMember> members;
  for (const auto& [split, n] : {std::pair<std::string, int>{"train", 200}, {"test", 50}}) {
    Bytes x(static_cast<size_t>(n) * 784);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 31);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 10;
    members.push_back({"x_" + split + ".npy", npy_bytes("|u1", "(" + std::to_string(n) + ", 28, 28)", x), true});
    members.push_back({"y_" + split + ".npy", npy_bytes("<i8", "(" + std::to_string(n) + ",)", le_bytes(y)), true});
  }
  write_bytes(dir.file("mnist.npz"), zip_bytes(members));
  const CliResult r = cli({"train", "--model", "mlp", "--batch", "100", "--data", dir.file("mnist.npz"),
                           "--devices", "cpu:0", "--json"});
  CHECK(r.status == 0);
  CHECK_THAT(r.err, Contains("200 samples of [1, 28, 28] in 10 classes from") && Contains("mnist.npz"));
  CHECK_THAT(r.out, Contains("\"epoch\": 1"));

  members[0].data = npy_bytes("|u1", "(200, 3, 28, 28)", Bytes(200 * 3 * 784));
  members[2].data = npy_bytes("|u1", "(50, 3, 28, 28)", Bytes(50 * 3 * 784));
  write_bytes(dir.file("rgb.npz"), zip_bytes(members));
  // Models are built for the samples: the MLP takes 3 x 28 x 28 images as 2352 inputs.
  const CliResult rgb = cli({"train", "--model", "mlp", "--batch", "100", "--data", dir.file("rgb.npz"),
                             "--devices", "cpu:0"});
  CHECK(rgb.status == 0);
  CHECK_THAT(rgb.err, Contains("samples of [3, 28, 28]") && Contains(std::to_string(2352 * 512 + 512 + 5130)));
}
