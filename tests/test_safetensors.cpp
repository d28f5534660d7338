// Tests of the JSON helper and safetensors checkpoints: round trips, every malformed-header error, atomic writes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/json.h"
#include "trident/core/safetensors.h"

#ifndef _WIN32
#include <csignal>
#include <sys/resource.h>
#endif

namespace fs = std::filesystem;
using trident::DType;
using trident::FormatError;
using trident::HostTensor;
using trident::TensorFile;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("trident-st-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

template <typename T>
HostTensor tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  HostTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// The fixed checkpoint that tests/safetensors_crosscheck.py also checks, value for value.
TensorFile crosscheck_file() {
  TensorFile f;
  f.metadata = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t unicode \xc3\xbc"}};
  f.tensors.push_back(tensor<float>("layer.weight", DType::f32, {2, 3}, {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));
  f.tensors.push_back(tensor<uint16_t>("half", DType::f16, {3}, {0x3C00, 0xC100, 0x0000}));   // 1, -2.5, 0
  f.tensors.push_back(tensor<uint16_t>("brain", DType::bf16, {1, 2, 1}, {0x3F80, 0xC040}));  // 1, -3
  f.tensors.push_back(tensor<int32_t>("step", DType::i32, {}, {1234}));                      // 0-d scalar
  f.tensors.push_back(tensor<uint8_t>("mask", DType::u8, {4}, {0, 1, 254, 255}));
  f.tensors.push_back(tensor<float>("empty", DType::f32, {0, 3}, {}));
  f.tensors.push_back(tensor<int32_t>("counts", DType::i32, {2, 2}, {-7, 0, 65536, 2147483647}));
  return f;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with the given header text and data_size zero bytes of data.
std::string crafted(const std::string& header, size_t data_size) {
  return le64(header.size()) + header + std::string(data_size, '\0');
}

// Writes bytes as `name` and returns load_safetensors' error message (fails the test if none).
std::string load_error(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  write_bytes(path, bytes);
  try {
    trident::load_safetensors(path);
  } catch (const FormatError& e) {
    CHECK_THAT(e.what(), Catch::Contains(name));
    return e.what();
  }
  FAIL("load_safetensors accepted malformed file " << name);
  return "";
}

}  // namespace

TEST_CASE("safetensors json parser and writer", "[safetensors][json]") {
  namespace json = trident::json;
  const json::Value v = json::parse(
      " {\"a\": [1, -2, 9223372036854775807, -9223372036854775808], \"s\": \"x\\\"\\\\\\/\\n\\u00fc\\ud83d\\ude00\","
      " \"o\": {}, \"e\": [], \"t\": true, \"n\": null} ");
  REQUIRE(v.kind == json::Value::Kind::object);
  REQUIRE(v.find("a") != nullptr);
  CHECK(v.find("a")->array.size() == 4);
  CHECK(v.find("a")->array[2].integer == INT64_MAX);
  CHECK(v.find("a")->array[3].integer == INT64_MIN);
  CHECK(v.find("s")->string == "x\"\\/\n\xc3\xbc\xf0\x9f\x98\x80");
  CHECK(v.find("t")->boolean);
  CHECK(v.find("n")->kind == json::Value::Kind::null);
  CHECK(v.find("missing") == nullptr);
  CHECK(json::quote("a\"b\\c\n\x01\xc3\xbc") == "\"a\\\"b\\\\c\\n\\u0001\xc3\xbc\"");
  CHECK(json::parse(json::quote("round \" trip \\ \x1f")).string == "round \" trip \\ \x1f");
  CHECK_THROWS_AS(json::quote("\xff"), trident::UsageError);

  const char* bad[] = {"", "{", "{\"a\":1,}", "[1,]", "01", "1.5", "1e3", "9223372036854775808",
                       "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"a\nb\"", "\"\xc0\xaf\"", "\"\xff\"",
                       "{\"a\":1,\"a\":2}", "{} {}", "tru", "{a:1}", "'a'", "\"\\u12g4\""};
  for (const char* text : bad) {
    INFO(text);
    CHECK_THROWS_AS(json::parse(text), FormatError);
  }
  CHECK_THROWS_WITH(json::parse(std::string(65, '[') + std::string(65, ']')), Catch::Contains("deeper than 64"));
  CHECK_NOTHROW(json::parse(std::string(64, '[') + std::string(64, ']')));
  CHECK_THROWS_WITH(json::parse("{\"w\":1,\"w\":2}"), Catch::Contains("duplicate key \"w\""));
}

TEST_CASE("safetensors round trip of dtypes, shapes and metadata", "[safetensors]") {
  TempDir dir;
  const TensorFile original = crosscheck_file();
  const std::string path = dir.file("model.safetensors");
  trident::save_safetensors(path, original);

  const TensorFile loaded = trident::load_safetensors(path);
  CHECK(loaded.metadata == original.metadata);
  REQUIRE(loaded.tensors.size() == original.tensors.size());
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    INFO(original.tensors[i].name);
    CHECK(loaded.tensors[i].name == original.tensors[i].name);  // file order is the order given
    CHECK(loaded.tensors[i].dtype == original.tensors[i].dtype);
    CHECK(loaded.tensors[i].shape == original.tensors[i].shape);
    CHECK(loaded.tensors[i].bytes == original.tensors[i].bytes);
  }
  // Layout: the data region starts 8-byte aligned and the header is padded with spaces.
  const std::string raw = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(raw[i]);
  CHECK(header_len % 8 == 0);
  CHECK(raw.substr(8, 15) == "{\"__metadata__\"");
  CHECK(raw.find_last_not_of(' ', 8 + header_len - 1) <= 8 + header_len - 1);
  CHECK(raw[raw.find_last_not_of(' ', 8 + header_len - 1)] == '}');

  // No metadata and no tensors is a valid (tiny) file too.
  trident::save_safetensors(dir.file("empty.safetensors"), TensorFile{});
  const TensorFile nothing = trident::load_safetensors(dir.file("empty.safetensors"));
  CHECK(nothing.metadata.empty());
  CHECK(nothing.tensors.empty());

  // Optional hand-run Python cross-check: write the same file where the script expects it.
  if (const char* out = std::getenv("TRIDENT_SAFETENSORS_CROSSCHECK")) trident::save_safetensors(out, original);
  // ... and read a file the Python library wrote (its own tensor order; bf16 left out by numpy).
  if (const char* in = std::getenv("TRIDENT_SAFETENSORS_FROM_PYTHON")) {
    const TensorFile py = trident::load_safetensors(in);
    CHECK(py.metadata == original.metadata);
    CHECK(py.tensors.size() == original.tensors.size() - 1);
    for (const HostTensor& t : py.tensors) {
      INFO("python tensor " << t.name);
      const auto same = std::find_if(original.tensors.begin(), original.tensors.end(),
                                     [&](const HostTensor& o) { return o.name == t.name; });
      REQUIRE(same != original.tensors.end());
      CHECK(t.dtype == same->dtype);
      CHECK(t.shape == same->shape);
      CHECK(t.bytes == same->bytes);
    }
  }
}

TEST_CASE("safetensors malformed files raise FormatError naming file and tensor", "[safetensors]") {
  TempDir dir;
  const auto has = [](const std::string& message, const char* part) { CHECK_THAT(message, Catch::Contains(part)); };
  const auto entry = [](const char* name, const char* dtype, const char* shape, const char* offsets) {
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };

  CHECK_THROWS_WITH(trident::load_safetensors(dir.file("absent.safetensors")),
                    Catch::Contains("absent.safetensors") && Catch::Contains("cannot open"));
  has(load_error(dir, "zero", ""), "too short");
  has(load_error(dir, "seven", "1234567"), "too short");
  has(load_error(dir, "past-end", le64(100) + "{}"), "runs past the end");
  has(load_error(dir, "absurd", le64(uint64_t{1} << 40) + "{}"), "absurdly large");
  has(load_error(dir, "not-json", crafted("{\"a\":", 0)), "bad header");
  has(load_error(dir, "nul-padding", crafted(std::string("{}\0\0", 4), 0)), "bad header");
  has(load_error(dir, "array", crafted("[]", 0)), "must be a JSON object, got array");
  has(load_error(dir, "meta-type", crafted("{\"__metadata__\":[]}", 0)), "__metadata__ must be an object");
  has(load_error(dir, "meta-value", crafted("{\"__metadata__\":{\"epoch\":3}}", 0)), "\"epoch\" must be a string");
  has(load_error(dir, "entry-type", crafted("{\"w\":5}", 0)), "tensor \"w\": expected an object, got integer");
  has(load_error(dir, "no-dtype", crafted("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4)),
      "tensor \"w\": missing field \"dtype\"");
  has(load_error(dir, "dtype-int", crafted("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4)),
      "field \"dtype\" must be string, got integer");
  has(load_error(dir, "shape-obj", crafted("{" + entry("w", "F32", "{}", "[0,4]") + "}", 4)),
      "field \"shape\" must be array");
  has(load_error(dir, "extra-field", crafted("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4)),
      "unexpected field \"x\"");
  has(load_error(dir, "dtype-f64", crafted("{" + entry("w", "F64", "[1]", "[0,8]") + "}", 8)),
      "tensor \"w\": unsupported dtype \"F64\"");
  has(load_error(dir, "negative", crafted("{" + entry("w", "F32", "[-1]", "[0,4]") + "}", 4)), "non-negative");
  has(load_error(dir, "shape-str", crafted("{" + entry("w", "F32", "[\"1\"]", "[0,4]") + "}", 4)), "non-negative integers");
  has(load_error(dir, "overflow", crafted("{" + entry("w", "F32", "[4611686018427387904,4]", "[0,4]") + "}", 4)),
      "overflows 64 bits");
  has(load_error(dir, "offsets-3", crafted("{" + entry("w", "U8", "[1]", "[0,1,2]") + "}", 1)), "exactly 2 entries");
  has(load_error(dir, "offsets-neg", crafted("{" + entry("w", "U8", "[1]", "[-1,0]") + "}", 1)), "non-negative");
  has(load_error(dir, "reversed", crafted("{" + entry("w", "U8", "[0]", "[4,0]") + "}", 4)), "[4,0] are reversed");
  has(load_error(dir, "out-of-range", crafted("{" + entry("w", "F32", "[4]", "[0,16]") + "}", 8)),
      "run past the 8-byte data region");
  has(load_error(dir, "size-mismatch", crafted("{" + entry("w", "F32", "[3]", "[0,8]") + "}", 8)),
      "tensor \"w\": data_offsets [0,8] hold 8 bytes but shape [3] of F32 needs 12");
  has(load_error(dir, "overlap",
                 crafted("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}", 12)),
      "tensor \"b\": data_offsets start at 4, overlapping tensor \"a\"");
  has(load_error(dir, "gap",
                 crafted("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}", 12)),
      "tensor \"b\": data_offsets start at 8, leaving bytes 4..8");
  has(load_error(dir, "not-first", crafted("{" + entry("a", "F32", "[1]", "[4,8]") + "}", 8)), "leaving bytes 0..4");
  has(load_error(dir, "uncovered", crafted("{" + entry("a", "F32", "[1]", "[0,4]") + "}", 8)),
      "tensors cover 4 bytes but the data region has 8");
  has(load_error(dir, "duplicate",
                 crafted("{" + entry("w", "F32", "[1]", "[0,4]") + "," + entry("w", "F32", "[1]", "[4,8]") + "}", 8)),
      "duplicate key \"w\"");
  // A valid crafted file (entries out of data order, zero-size tensors anywhere) is accepted.
  write_bytes(dir.file("valid"), crafted("{" + entry("b", "U8", "[2]", "[4,6]") + "," + entry("a", "F32", "[1]", "[0,4]") +
                                             "," + entry("z", "F32", "[0]", "[4,4]") + "}  ", 6));
  const TensorFile ok = trident::load_safetensors(dir.file("valid"));
  REQUIRE(ok.tensors.size() == 3);
  CHECK(ok.tensors[0].name == "a");
  CHECK(ok.tensors[2].name == "b");
}

TEST_CASE("safetensors save rejects bad tensors before touching the disk", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  TensorFile dup;
  dup.tensors = {tensor<float>("w", DType::f32, {1}, {1.0f}), tensor<float>("w", DType::f32, {1}, {2.0f})};
  CHECK_THROWS_AS(trident::save_safetensors(path, dup), trident::UsageError);
  TensorFile wrong_size;
  wrong_size.tensors = {tensor<float>("w", DType::f32, {2, 2}, {1.0f})};
  CHECK_THROWS_AS(trident::save_safetensors(path, wrong_size), trident::ShapeError);
  TensorFile negative;
  negative.tensors = {tensor<float>("w", DType::f32, {-1}, {})};
  CHECK_THROWS_AS(trident::save_safetensors(path, negative), trident::ShapeError);
  TensorFile reserved;
  reserved.tensors = {tensor<float>("__metadata__", DType::f32, {}, {1.0f})};
  CHECK_THROWS_AS(trident::save_safetensors(path, reserved), trident::UsageError);
  CHECK(dir.listing().empty());
}

TEST_CASE("safetensors writes atomically", "[safetensors]") {
  TempDir dir;
  const TensorFile small = crosscheck_file();
  TensorFile big;
  big.metadata["kind"] = "big";
  big.tensors.push_back(tensor<float>("w", DType::f32, {256, 256}, std::vector<float>(256 * 256, 0.25f)));

  SECTION("into a missing directory: throws, creates nothing") {
    const fs::path missing = dir.path / "no" / "such";
    CHECK_THROWS_WITH(trident::save_safetensors((missing / "m.safetensors").string(), small),
                      Catch::Contains("m.safetensors") && Catch::Contains("does not exist"));
    CHECK(!fs::exists(dir.path / "no"));
    CHECK(dir.listing().empty());
  }
  SECTION("overwriting replaces the file whole and leaves no temporary") {
    const std::string path = dir.file("ckpt.safetensors");
    trident::save_safetensors(path, big);
    trident::save_safetensors(path, small);
    const TensorFile loaded = trident::load_safetensors(path);
    CHECK(loaded.metadata == small.metadata);
    CHECK(loaded.tensors.size() == small.tensors.size());
    CHECK(dir.listing() == std::vector<std::string>{"ckpt.safetensors"});
  }
  SECTION("a directory as the target: refused by name before a temporary is made") {
    fs::create_directory(dir.path / "taken");
    CHECK_THROWS_WITH(trident::save_safetensors(dir.file("taken"), small),
                      Catch::Contains(dir.file("taken")) && Catch::Contains("is a directory"));
    CHECK_THROWS_WITH(trident::save_safetensors(dir.file("taken") + "/", small),
                      Catch::Contains("is a directory"));
    CHECK_THROWS_WITH(trident::save_safetensors("", small), Catch::Contains("empty"));
    CHECK(dir.listing() == std::vector<std::string>{"taken"});
  }
#ifndef _WIN32
  SECTION("a full disk (file size limit) keeps the previous file and removes the temporary") {
    const std::string path = dir.file("ckpt.safetensors");
    trident::save_safetensors(path, small);
    const std::string before = read_bytes(path);
    // RLIMIT_FSIZE makes write() fail with EFBIG (SIGXFSZ ignored) past 16 KiB, like ENOSPC would.
    rlimit old{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit low = old;
    low.rlim_cur = 16384;
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &low) == 0);
    std::string message;
    try {
      trident::save_safetensors(path, big);
    } catch (const trident::Error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK_THAT(message, Catch::Contains("ckpt.safetensors") && Catch::Contains("unchanged"));
    CHECK(read_bytes(path) == before);
    CHECK(dir.listing() == std::vector<std::string>{"ckpt.safetensors"});
  }
#endif
}
