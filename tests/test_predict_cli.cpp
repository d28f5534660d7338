// Image inputs (PGM and PNG readers, channel conversion, bilinear resizing) and the weights
// commands of the CLI: `trident predict` against the Predictor and against `trident eval` on the
// same samples, `trident export-weights`, `trident eval` of a weights file, and the errors they
// give for inputs they cannot use.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/idx.h"
#include "trident/core/image.h"
#include "trident/core/json.h"
#include "trident/core/npy.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/predictor.h"
#include "trident/models/state_dict.h"
#include "trident/models/zoo.h"
#include "tests/test_data.h"
#include "tests/test_files.h"

using namespace trident;
using trident::testing::Bytes;
using trident::testing::cli;
using trident::testing::ScratchDir;

namespace {

Device& cpu() { return DeviceRegistry::global().device("cpu"); }

void put32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

Bytes png_chunk(const std::string& type, const Bytes& data) {
  Bytes out;
  put32(out, uint32_t(data.size()));
  Bytes body(type.begin(), type.end());
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put32(out, uint32_t(crc32(0, body.data(), uInt(body.size()))));
  return out;
}

// A PNG of `rows` (each packed as the colour type and depth say, without the filter byte).
Bytes png_file(uint32_t width, uint32_t height, uint8_t depth, uint8_t color,
               const std::vector<Bytes>& rows, const Bytes& palette = {}, const Bytes& trns = {}) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put32(ihdr, width);
  put32(ihdr, height);
  ihdr.insert(ihdr.end(), {depth, color, 0, 0, 0});
  Bytes raw;
  for (const Bytes& row : rows) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), row.begin(), row.end());
  }
  uLongf size = compressBound(uLong(raw.size()));
  Bytes packed(size);
  compress(packed.data(), &size, raw.data(), uLong(raw.size()));
  packed.resize(size);
  const Bytes chunks[] = {png_chunk("IHDR", ihdr), palette.empty() ? Bytes() : png_chunk("PLTE", palette),
                          trns.empty() ? Bytes() : png_chunk("tRNS", trns), png_chunk("IDAT", packed),
                          png_chunk("IEND", {})};
  for (const Bytes& c : chunks) out.insert(out.end(), c.begin(), c.end());
  return out;
}

Bytes pgm_p5(int width, int height, const Bytes& pixels) {
  const std::string head = "P5\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  Bytes out(head.begin(), head.end());
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::string write(const ScratchDir& dir, const std::string& name, const Bytes& bytes) {
  trident::testing::write_bytes(dir.file(name), bytes);
  return dir.file(name);
}

Bytes random_pixels(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes v(n);
  for (auto& x : v) x = uint8_t(rng() >> 24);
  return v;
}

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

// The seed CNN's weights (built from seed 5) in dir/cnn.safetensors; the path.
std::string seed_cnn_weights(const ScratchDir& dir) {
  Network net = make_seed_cnn();
  net.build(cpu(), {1, 28, 28}, 5, false);
  const std::string weights = dir.file("cnn.safetensors");
  save_weights(net, weights);
  return weights;
}

// The "test_accuracy" of `trident eval --json`.
double eval_accuracy(const std::vector<std::string>& args) {
  const auto r = cli(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return json::parse(r.out, true).find("test_accuracy")->number;
}

}  // namespace

TEST_CASE("images: PGM and PNG files of every kind are read; malformed ones name the file",
          "[images]") {
  ScratchDir dir("images");
  Image a = load_image(write(dir, "a.pgm", pgm_p5(3, 2, {0, 10, 20, 30, 40, 255})));
  CHECK((a.channels == 1 && a.width == 3 && a.height == 2));
  CHECK(a.pixels == Bytes{0, 10, 20, 30, 40, 255});
  Image b = load_image(write(dir, "b.pgm", text("P2\n# a comment\n3 2 # inline\n15\n0 1 2\n3 4 15\n")));
  CHECK(b.pixels == Bytes{0, 17, 34, 51, 68, 255});  // scaled from maxval 15, rounded
  Bytes wide = text("P5 2 1 65535\n");
  wide.insert(wide.end(), {0x80, 0x00, 0xff, 0xff});
  CHECK(load_image(write(dir, "c.pgm", wide)).pixels == Bytes{128, 255});
  Bytes truncated = text("P5\n3 2\n255\n");
  truncated.insert(truncated.end(), 4, 7);  // 4 of the 6 pixels
  const std::vector<std::pair<Bytes, std::string>> bad_pgm = {
      {truncated, "truncated"},
      {text("P5\n0 2\n255\n"), "empty or too large"},
      {text("P2\n1 1\n70000\n1\n"), "outside 1..65535"},
      {text("P2\n2 1\n10\n3 11\n"), "exceeds maxval"},
      {text("P2\n2 1\n10\n3"), "ends before the pixel value"},
      {text("P5\n99999999 99999999\n255\n"), "too large"},
      {text("P7\nWIDTH 2\n"), "not a PNG or PGM"},
  };
  for (size_t i = 0; i < bad_pgm.size(); ++i) {
    const std::string path = write(dir, "bad" + std::to_string(i) + ".pgm", bad_pgm[i].first);
    CHECK_THROWS_WITH(load_image(path), Catch::Contains(path) && Catch::Contains(bad_pgm[i].second));
  }
  if (!png_supported()) {
    WARN("built without libpng: PNG cases skipped");
    return;
  }
  CHECK(load_image(write(dir, "g.png", png_file(2, 2, 8, 0, {{1, 2}, {3, 4}}))).pixels ==
        Bytes{1, 2, 3, 4});
  Image rgb = load_image(write(dir, "rgb.png", png_file(2, 1, 8, 2, {{255, 0, 0, 7, 8, 9}})));
  CHECK(rgb.channels == 3);
  CHECK(rgb.pixels == Bytes{255, 7, 0, 8, 0, 9});  // planes R, G, B
  CHECK(load_image(write(dir, "g16.png", png_file(2, 1, 16, 0, {{0x80, 0x00, 0xff, 0xff}}))).pixels ==
        Bytes{128, 255});
  CHECK(load_image(write(dir, "bits.png", png_file(8, 1, 1, 0, {{0xa0}}))).pixels ==
        Bytes{255, 0, 255, 0, 0, 0, 0, 0});
  Image palette = load_image(write(dir, "p.png", png_file(2, 1, 8, 3, {{1, 0}}, {0, 0, 0, 0, 255, 0}, {0})));
  CHECK((palette.channels == 3 && palette.pixels == Bytes{0, 0, 255, 0, 0, 0}));
  CHECK(load_image(write(dir, "rgba.png", png_file(1, 1, 8, 6, {{10, 20, 30, 40}}))).pixels ==
        Bytes{10, 20, 30});
  CHECK(load_image(write(dir, "ga.png", png_file(1, 1, 8, 4, {{90, 0}}))).pixels == Bytes{90});
  Bytes broken = png_file(2, 2, 8, 0, {{1, 2}, {3, 4}});
  broken[29] ^= 0xff;  // the IHDR chunk's CRC
  Bytes cut = png_file(2, 2, 8, 0, {{1, 2}, {3, 4}});
  cut.resize(cut.size() - 20);
  for (const auto& [name, bytes] : {std::pair<std::string, Bytes>{"crc.png", broken}, {"cut.png", cut}}) {
    const std::string path = write(dir, name, bytes);
    CHECK_THROWS_WITH(load_image(path), Catch::Contains(path) && Catch::Contains("not a readable PNG"));
  }
}

TEST_CASE("images: RGB to gray by BT.601 luma, gray to RGB, and bilinear resizing as PyTorch's",
          "[images]") {
  Image rgb{3, 1, 4, {255, 0, 0, 100, 0, 255, 0, 100, 0, 0, 255, 100}};
  CHECK(convert_channels(rgb, 1).pixels == Bytes{76, 150, 29, 100});
  Image gray{1, 1, 2, {5, 6}};
  CHECK(convert_channels(gray, 3).pixels == Bytes{5, 6, 5, 6, 5, 6});
  // Upsampling 2x2 -> 4x4 with half-pixel centres (interpolate(..., align_corners=False)).
  const Image up = resize_bilinear(Image{1, 2, 2, {0, 100, 200, 50}}, 4, 4);
  const auto at = [&](int y, int x) { return int(up.pixels[size_t(y * 4 + x)]); };
  CHECK(at(0, 0) == 0);
  CHECK(at(0, 1) == 25);
  CHECK(at(0, 2) == 75);
  CHECK(at(0, 3) == 100);
  CHECK(at(1, 0) == 50);
  CHECK(at(1, 1) == 59);  // 0.75 * 25 + 0.25 * 162.5
  CHECK(at(3, 0) == 200);
  CHECK(at(3, 3) == 50);
  // Halving averages 2x2 blocks; the same size is the identity.
  Image big{1, 4, 4, {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150}};
  CHECK(resize_bilinear(big, 2, 2).pixels == Bytes{25, 45, 105, 125});
  CHECK(resize_bilinear(big, 4, 4).pixels == big.pixels);
}

TEST_CASE("trident predict: images and .npy batches, as text and JSON, answered as the Predictor "
          "answers", "[predict][cli]") {
  ScratchDir dir("predict");
  const ModelRecipe& recipe = find_model("cnn");
  Network net = recipe.make(10);
  net.build(cpu(), {1, 28, 28}, 17, false);
  const std::string weights = dir.file("cnn.safetensors");
  save_weights(net, weights);
  const Bytes pixels = random_pixels(7 * 784, 3);
  const auto sample = [&](int i) { return Bytes(pixels.begin() + i * 784, pixels.begin() + (i + 1) * 784); };
  const std::string pgm = write(dir, "zero.pgm", pgm_p5(28, 28, sample(0)));
  // The second sample as an RGB PNG (gray repeated: the luma gives it back exactly).
  std::vector<Bytes> rows;
  for (int y = 0; y < 28; ++y) {
    Bytes row;
    for (int x = 0; x < 28; ++x) row.insert(row.end(), 3, pixels[size_t(784 + y * 28 + x)]);
    rows.push_back(row);
  }
  const bool png = png_supported();
  const std::string png_path = write(dir, "one.png", png_file(28, 28, 8, 2, rows));
  const std::string bytes_npy = write(dir, "batch.npy",
      trident::testing::npy_bytes("|u1", "(3, 28, 28)", Bytes(pixels.begin() + 2 * 784, pixels.begin() + 5 * 784)));
  std::vector<float> floats(2 * 784);
  for (size_t i = 0; i < floats.size(); ++i)
    floats[i] = (pixels[5 * 784 + i] / 255.0f - recipe.mean) / recipe.std;
  const std::string float_npy = write(dir, "floats.npy",
      trident::testing::npy_bytes("<f4", "(2, 1, 28, 28)", trident::testing::le_bytes(floats)));
  PredictorOptions options;
  options.normalization = {true, {recipe.mean}, {recipe.std}};
  Predictor predictor(recipe.factory(), cpu(), weights, options);
  const std::vector<float> expected = predictor.outputs(pixels.data(), 7);

  const std::string outputs = dir.file("out.npy");
  std::vector<std::string> args = {"predict", "--checkpoint", weights, "--device", "cpu", "--top", "3",
                                   "--outputs", outputs, "--json", pgm};
  if (png) args.push_back(png_path);
  args.insert(args.end(), {bytes_npy, float_npy});
  const auto r = cli(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  // One JSON object per sample, in input order; samples of a .npy carry their row.
  std::vector<int> order = {0};
  if (png) order.push_back(1);
  order.insert(order.end(), {2, 3, 4, 5, 6});
  std::istringstream lines(r.out);
  std::string line;
  size_t k = 0;
  for (; std::getline(lines, line); ++k) {
    REQUIRE(k < order.size());
    const int s = order[k];
    const json::Value v = json::parse(line, true);
    const int64_t best = argmax(&expected[size_t(s * 10)], 10);
    CHECK(v.find("class")->integer == best);
    CHECK(v.find("label")->string == kFashionMnistClassNames[size_t(best)]);
    CHECK(v.find("top_classes")->array.size() == 3);
    CHECK(v.find("top_labels")->array.size() == 3);
    CHECK(v.find("model")->string == "cnn");
    CHECK((v.find("row") != nullptr) == (s >= 2));
    if (s >= 2) CHECK(v.find("row")->integer == (s < 5 ? s - 2 : s - 5));
  }
  CHECK(k == order.size());
  // The raw outputs, as float32 [N, classes].
  const NpyArray out = load_npy(outputs);
  REQUIRE(out.shape == std::vector<int64_t>{int64_t(order.size()), 10});
  for (size_t i = 0; i < order.size(); ++i)
    for (int c = 0; c < 10; ++c) {
      float got;
      std::memcpy(&got, out.bytes.data() + 4 * (i * 10 + c), 4);
      CHECK(got == Approx(expected[size_t(order[i] * 10 + c)]).margin(1e-5));
    }
  // Text: "path: Label 12.34%, ..."; --labels names the classes.
  const std::string labels = write(dir, "labels.txt", text("c0\nc1\nc2\nc3\nc4\nc5\nc6\nc7\nc8\nc9\n\n"));
  const auto t = cli({"predict", "--checkpoint", weights, "--labels", labels, "--top", "1", pgm, bytes_npy});
  REQUIRE(t.status == 0);
  const std::string first = pgm + ": c" + std::to_string(argmax(&expected[0], 10)) + " ";
  CHECK(t.out.rfind(first, 0) == 0);
  CHECK_THAT(t.out, Catch::Contains(bytes_npy + "[2]: c" + std::to_string(argmax(&expected[40], 10)) + " "));
  // --precision bf16: the network in bfloat16, the outputs still float32, near the float32 ones.
  const std::string outputs16 = dir.file("out16.npy");
  const auto h = cli({"predict", "--checkpoint", weights, "--precision", "bf16", "--outputs",
                      outputs16, pgm, bytes_npy});
  INFO(h.err);
  REQUIRE(h.status == 0);
  CHECK_THAT(h.err, Catch::Contains(" in bf16"));
  const NpyArray out16 = load_npy(outputs16);
  REQUIRE(out16.shape == std::vector<int64_t>{4, 10});
  const int rows16[] = {0, 2, 3, 4};
  for (size_t i = 0; i < 4; ++i)
    for (int c = 0; c < 10; ++c) {
      float got;
      std::memcpy(&got, out16.bytes.data() + 4 * (i * 10 + c), 4);
      const float want = expected[size_t(rows16[i] * 10 + c)];
      CHECK(got == Approx(want).margin(0.05 * (1.0 + std::fabs(want))));
    }
  CHECK(cli({"predict", "--checkpoint", weights, "--precision", "fp8", pgm}).status == 2);
  const std::string nine = write(dir, "nine.txt", text("a\nb\nc\nd\ne\nf\ng\nh\ni\n"));
  const auto n = cli({"predict", "--checkpoint", weights, "--labels", nine, pgm});
  CHECK(n.status == 2);
  CHECK_THAT(n.err, Catch::Contains("has 9 class names") && Catch::Contains("10 classes"));
}

TEST_CASE("cli: an option a command does not read is an error naming both, and nothing runs",
          "[predict][cli]") {
  ScratchDir dir("foreign-options");
  const std::string weights = seed_cnn_weights(dir);
  const std::string pgm = write(dir, "x.pgm", pgm_p5(28, 28, random_pixels(784, 1)));
  const std::string exported = dir.file("exported.safetensors");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"predict", "--checkpoint", weights, "--epochs", "3", pgm}, "predict does not take --epochs"},
      {{"predict", "--checkpoint", weights, "--augment", pgm}, "predict does not take --augment"},
      {{"eval", "--checkpoint", weights, "--batch", "64"}, "eval does not take --batch"},
      {{"eval", "--checkpoint", weights, "--top", "3"}, "eval does not take --top"},
      {{"train", "--epochs", "1", "--outputs", dir.file("o.npy")}, "train does not take --outputs"},
      {{"export-weights", "--checkpoint", weights, "--output", exported, "--precision", "bf16"},
       "export-weights does not take --precision"},
      {{"devices", "--model", "cnn"}, "devices does not take --model"},
  };
  for (const auto& [args, message] : cases) {
    INFO(args[0] << " " << args[1]);
    const auto r = cli(args);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Catch::Contains(message));
    CHECK(r.out.empty());
  }
  CHECK_FALSE(std::filesystem::exists(exported));
  CHECK_FALSE(std::filesystem::exists(dir.file("o.npy")));
}

TEST_CASE("trident predict: inputs and files it cannot use are errors naming them, and nothing is "
          "printed", "[predict][cli]") {
  ScratchDir dir("predict-errors");
  const std::string weights = seed_cnn_weights(dir);
  const std::string good = write(dir, "good.pgm", pgm_p5(28, 28, random_pixels(784, 1)));
  const std::string big = write(dir, "big.pgm", pgm_p5(32, 30, random_pixels(960, 2)));
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"predict", "--checkpoint", weights});
    return cli(args);
  };
  const auto refused = run({good, big});
  CHECK(refused.status == 2);
  CHECK(refused.out.empty());  // the good image's answer is not printed either
  CHECK_THAT(refused.err, Catch::Contains(big) && Catch::Contains("32x30") &&
                              Catch::Contains("28x28") && Catch::Contains("--resize"));
  const auto resized = run({"--resize", good, big});
  CHECK(resized.status == 0);
  CHECK_THAT(resized.err, Catch::Contains("resized from 32x30 to 28x28 (bilinear)"));
  // A weights file without metadata (as PyTorch writes it) needs --model.
  TensorFile bare = load_safetensors(weights);
  bare.metadata.clear();
  const std::string torch_style = dir.file("bare.safetensors");
  save_safetensors(torch_style, bare);
  const auto no_model = cli({"predict", "--checkpoint", torch_style, good});
  CHECK(no_model.status == 2);
  CHECK_THAT(no_model.err, Catch::Contains("--model NAME"));
  const auto with_model = cli({"predict", "--checkpoint", torch_style, "--model", "cnn", good});
  CHECK(with_model.status == 0);
  CHECK(with_model.out == run({good}).out);
  CHECK_THAT(run({"--model", "mlp", good}).err, Catch::Contains("holds model \"cnn\""));
  struct Case {
    std::string file;
    Bytes bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"f64.npy", trident::testing::npy_bytes("<f8", "(1, 28, 28)", Bytes(784 * 8, 0)), "dtype '<f8'"},
      {"shape.npy", trident::testing::npy_bytes("|u1", "(2, 30, 30)", Bytes(1800, 0)), "arrays are not resized"},
      {"empty.npy", trident::testing::npy_bytes("|u1", "(0, 28, 28)", Bytes()), "no samples"},
      {"nan.npy", trident::testing::npy_bytes("<f4", "(1, 784)", trident::testing::le_bytes(std::vector<float>(784, NAN))),
       "shape"},
      {"notes.txt", text("hello"), "not a PNG image, a PGM image (P2, P5) or a NumPy .npy file"},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    const std::string path = write(dir, c.file, c.bytes);
    const auto e = run({good, path});
    CHECK(e.status != 0);
    CHECK(e.out.empty());
    CHECK_THAT(e.err, Catch::Contains(path) && Catch::Contains(c.message));
  }
  std::vector<float> nan_sample(784, 0.0f);
  nan_sample[5] = NAN;
  const std::string nan_path = write(dir, "nan2.npy",
      trident::testing::npy_bytes("<f4", "(1, 1, 28, 28)", trident::testing::le_bytes(nan_sample)));
  CHECK_THAT(run({nan_path}).err, Catch::Contains("non-finite"));
  CHECK_THAT(run({dir.file("absent.png")}).err, Catch::Contains("absent.png"));
  CHECK_THAT(run({}).err, Catch::Contains("at least one INPUT"));
  CHECK_THAT(cli({"train", "stray"}).err, Catch::Contains("unexpected argument 'stray'"));
  CHECK(cli({"predict", good}).status == 2);  // no --checkpoint
}

TEST_CASE("trident export-weights, eval of a weights file, and predict agreeing with eval on the "
          "same test samples", "[predict][cli]") {
  ScratchDir dir("export");
  // Fashion-MNIST when installed, else a synthetic MNIST-format directory.
  std::string data = default_data_directory();
  if (!trident::testing::real_data_available()) {
    data = dir.file("data");
    trident::testing::write_mnist_directory(data, 600, 300);
  }
  const std::string checkpoint = dir.file("run.safetensors");
  const std::vector<std::string> limits = {"--data", data, "--test-limit", "300"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), limits.begin(), limits.end());
    return args;
  };
  const auto trained = cli(with({"train", "--model", "resnet", "--epochs", "1", "--batch", "100",
                                 "--train-limit", "400", "--checkpoint", checkpoint, "--devices",
                                 "cpu:0"}));
  INFO(trained.err);
  REQUIRE(trained.status == 0);
  const double accuracy = eval_accuracy(with({"eval", "--checkpoint", checkpoint, "--json"}));

  // export-weights: the state dict alone, in PyTorch's names; eval of it gives the same answer.
  const std::string weights = dir.file("w.safetensors");
  const auto exported = cli({"export-weights", "--checkpoint", checkpoint, "--output", weights});
  INFO(exported.err);
  REQUIRE(exported.status == 0);
  const TensorFile file = load_safetensors(weights);
  CHECK_FALSE(is_training_checkpoint(file));
  for (const HostTensor& t : file.tensors) CHECK(t.name.rfind("optimizer.", 0) == std::string::npos);
  CHECK(file.tensors.size() == load_safetensors(checkpoint).tensors.size() - 1);  // momentum_buffer
  CHECK(eval_accuracy(with({"eval", "--checkpoint", weights, "--json"})) == accuracy);
  TensorFile bare = file;
  bare.metadata.clear();
  const std::string torch_style = dir.file("bare.safetensors");
  save_safetensors(torch_style, bare);
  const auto unnamed = cli(with({"eval", "--checkpoint", torch_style}));
  CHECK(unnamed.status == 2);
  CHECK_THAT(unnamed.err, Catch::Contains("--model"));
  CHECK(eval_accuracy(with({"eval", "--checkpoint", torch_style, "--model", "resnet", "--json"})) ==
        accuracy);
  const std::string half = dir.file("half.safetensors");
  REQUIRE(cli({"export-weights", "--checkpoint", checkpoint, "--output", half, "--dtype", "bf16"}).status == 0);
  for (const HostTensor& t : load_safetensors(half).tensors)
    CHECK(t.dtype == (t.name.find("num_batches_tracked") != std::string::npos ? DType::i64 : DType::bf16));
  CHECK(std::fabs(eval_accuracy(with({"eval", "--checkpoint", half, "--json"})) - accuracy) < 0.05);
  CHECK(cli({"export-weights", "--checkpoint", checkpoint, "--output", half, "--dtype", "f8"}).status == 2);

  // predict on the same 300 test samples, as a .npy, answers exactly as eval scored them.
  DatasetLoadOptions o;
  o.test_limit = 300;
  o.train_limit = 1;
  const Dataset test = load_idx_directory(data, o).test;
  const std::vector<uint8_t> images(test.uint8_data(), test.uint8_data() + 300 * 784);
  const std::string npy = write(dir, "test.npy", trident::testing::npy_bytes("|u1", "(300, 28, 28)", images));
  const auto predicted = cli({"predict", "--checkpoint", checkpoint, "--json", "--top", "1", npy});
  REQUIRE(predicted.status == 0);
  std::istringstream lines(predicted.out);
  std::string line;
  int64_t rows = 0, correct = 0;
  for (; std::getline(lines, line); ++rows)
    correct += json::parse(line, true).find("class")->integer == test.labels()[size_t(rows)];
  CHECK(rows == 300);
  CHECK(correct == std::llround(accuracy * 300));
}
