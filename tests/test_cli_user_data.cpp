// The CLI with a user's own data: the model's classes come from the data (or --classes, or the
// file a run resumes or evaluates), options that would be ignored are refused, and device names
// that name nothing exit with status 2 (README, "The CLI").
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_files.h"
#include "trident/core/dataset.h"
#include "trident/core/log.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"

namespace {

using Catch::Contains;
using namespace trident::testing;

// An .npz of float32 samples [n, 1, 4, 4] (values from the index) whose labels cycle through
// `labels`, in both splits.
Bytes npz_with_labels(int n, const std::vector<int64_t>& labels) {
  std::vector<ZipMember> members;
  for (const std::string split : {"train", "test"}) {
    std::vector<float> x(static_cast<size_t>(n) * 16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) / 7.0f;
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) y[size_t(i)] = labels[size_t(i) % labels.size()];
    members.push_back({"x_" + split + ".npy",
                       npy_bytes("<f4", "(" + std::to_string(n) + ", 1, 4, 4)", le_bytes(x))});
    members.push_back({"y_" + split + ".npy",
                       npy_bytes("<i8", "(" + std::to_string(n) + ",)", le_bytes(y))});
  }
  return zip_bytes(members);
}

std::vector<std::string> train_mlp(const std::string& data, std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--model", "mlp", "--batch", "20", "--epochs", "1",
                                   "--devices", "cpu:0", "--data", data};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The row count of the last layer's weight in a checkpoint or weights file (mlp: fc2.weight).
int64_t output_rows(const std::string& path) {
  for (const auto& t : trident::load_safetensors(path).tensors)
    if (t.name == "fc2.weight") return t.shape.at(0);
  return -1;
}

}  // namespace

TEST_CASE("cli: a model has the data's classes, --classes, or its file's", "[cli][data]") {
  ScratchDir dir("classes");
  const std::string four = dir.file("four.npz"), ten = dir.file("ten.npz");
  write_bytes(four, npz_with_labels(40, {0, 1, 2, 3}));
  write_bytes(ten, npz_with_labels(40, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const std::string checkpoint = dir.file("four.safetensors");

  CliResult r = cli(train_mlp(four, {"--checkpoint", checkpoint}));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.err, Contains("in 4 classes"));
  CHECK(output_rows(checkpoint) == 4);  // not a floor of 10

  SECTION("eval and resume take the file's classes; data with more is an error") {
    r = cli({"eval", "--checkpoint", checkpoint, "--data", four, "--devices", "cpu:0"});
    CHECK(r.status == 0);
    r = cli(train_mlp(four, {"--checkpoint", checkpoint, "--resume", "--epochs", "2"}));
    CHECK(r.status == 0);
    CHECK(output_rows(checkpoint) == 4);
    r = cli({"eval", "--checkpoint", checkpoint, "--data", ten, "--devices", "cpu:0"});
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("labels up to 9") && Contains("4 classes"));
    r = cli(train_mlp(ten, {"--checkpoint", checkpoint, "--resume", "--epochs", "3"}));
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("labels up to 9") && Contains("4 classes"));
  }
  SECTION("--classes widens the model; labels at or past it are an error") {
    const std::string six = dir.file("six.safetensors");
    r = cli(train_mlp(four, {"--classes", "6", "--checkpoint", six}));
    CHECK(r.status == 0);
    CHECK(output_rows(six) == 6);
    r = cli(train_mlp(four, {"--classes", "3"}));  // the data's error (exit 1), naming the label
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("label 3") && Contains("0..2"));
  }
  SECTION("sparse labels: a warning that names the empty classes") {
    const std::string sparse = dir.file("sparse.npz");
    write_bytes(sparse, npz_with_labels(40, {0, 1, 99}));
    r = cli(train_mlp(sparse, {}));
    CHECK(r.status == 0);
    CHECK_THAT(r.err, Contains("97 of the 100 classes have no training sample") &&
                          Contains("--classes"));
    r = cli(train_mlp(four, {}));
    CHECK_THAT(r.err, !Contains("warning"));
  }
}

TEST_CASE("cli: options the run would ignore or that name nothing are usage errors",
          "[cli][errors]") {
  ScratchDir dir("ignored");
  const std::string data = dir.file("four.npz");
  write_bytes(data, npz_with_labels(40, {0, 1, 2, 3}));

  // The ResNet's recipe is onecycle, whose peak is --max-lr: --lr would be silently unused.
  CliResult r = cli({"train", "--model", "resnet", "--lr", "0.5", "--data", data});
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--lr has no effect with the onecycle schedule") &&
                        Contains("--max-lr"));
  r = cli(train_mlp(data, {"--schedule", "onecycle", "--max-lr", "0.1", "--lr", "0.5"}));
  CHECK(r.status == 2);
  r = cli(train_mlp(data, {"--schedule", "onecycle", "--max-lr", "0.1"}));
  CHECK(r.status == 0);
  CHECK_THAT(r.err, Contains("max lr 0.1 (onecycle schedule)"));

  r = cli(train_mlp(data, {"--momentum", "2"}));
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--momentum '2' must be below 1"));

  r = cli({"train", "--devices", "tpu:0", "--data", data});
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("unknown backend 'tpu'"));

  ::setenv("TRIDENT_BACKEND", "metal", 1);
  r = cli({"devices"});
  ::unsetenv("TRIDENT_BACKEND");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("TRIDENT_BACKEND='metal' names no backend"));
  CHECK_THAT(r.out, Contains("cpu:") && !Contains("default device"));
}

TEST_CASE("data: channels-last samples load with a warning; an empty test split is named",
          "[data][errors]") {
  ScratchDir dir("layout");
  std::vector<ZipMember> members;
  for (const std::string split : {"train", "test"}) {
    const Bytes x(size_t(4) * 8 * 8 * 3, 7);
    members.push_back({"x_" + split + ".npy", npy_bytes("|u1", "(4, 8, 8, 3)", x)});
    members.push_back({"y_" + split + ".npy", npy_bytes("<i8", "(4,)", le_bytes(std::vector<int64_t>{0, 1, 0, 1}))});
  }
  write_bytes(dir.file("nhwc.npz"), zip_bytes(members));
  std::vector<std::string> warnings;
  const trident::LogHandler previous =
      trident::set_log_handler([&](trident::LogLevel level, const std::string& message) {
        if (level == trident::LogLevel::warning) warnings.push_back(message);
      });
  const trident::DatasetSplits data = trident::load_dataset(dir.file("nhwc.npz"));
  trident::set_log_handler(previous);
  CHECK(data.train.sample_shape() == trident::Shape{8, 8, 3});  // loaded as stored
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0], Contains("x_train") && Contains("np.transpose(x, (0, 3, 1, 2))"));

  trident::DatasetSplits no_test{data.train, trident::Dataset(), "memory"};
  trident::TrainOptions o;
  o.batch = 2;
  trident::Device& cpu = trident::DeviceRegistry::global().device("cpu:0");
  CHECK_THROWS_WITH(
      trident::Trainer({&cpu}, [] { return trident::make_seed_mlp(); }, no_test, o),
      Contains("the test split has no samples"));
}
