// trident_bench: training throughput of the built-in models (through the real Trainer, so
// captured steps are what is timed) in each precision, inference latency and throughput (through
// the Predictor), GEMM GFLOP/s through Device::gemm in each operand type, and data-parallel weak
// scaling; one JSON object per measurement on stdout (bench/run_bench.py compares them with
// PyTorch).
//
//   trident_bench [--device cpu:0|cuda:0|opencl:0] [--models mlp,cnn,mlp-big,resnet,resnet9]
//                 [--batch N] [--big-batch N] [--steps N] [--epochs N]
//                 [--precision fp32,tf32,bf16,fp16]
//                 [--gemm-sizes 256,1024,...] [--gemm-types fp32,tf32,bf16,bf16-f32,...]
//                 [--gemm-shapes 200x512x784nt,...] [--gemm] [--no-train] [--no-gemm]
//                 [--no-capture] [--data DIR|synthetic] [--inference] [--inference-batches 1,1000]
//   trident_bench --devices cuda:0,cuda:1 [--model mlp-big] [--batch 512]   (weak scaling)
//   trident_bench --list-devices                      (one JSON object per device found)
//
// Timing: the data set (batch * steps samples, Fashion-MNIST tiled to that size, or synthetic)
// is resident on the device. Epoch 1 is warm-up (the first step runs eagerly and allocates, the
// second is captured); epochs 2..N are timed, each ending in the Trainer's one loss read-back.
// ms_per_step is the median over the timed epochs, ms_per_step_min the best.
// Inference (--inference, bench "inference"): a Predictor built for inference with random
// weights takes float32 inputs already in host memory and returns the outputs to host memory;
// one call (copy in, forward replayed from its capture where the device can, copy out) is the
// latency timed. Three warm-up calls (eager, captured, replayed), then calls for about a second
// (at least 5): ms_per_step is the median call, ms_per_step_min the fastest, samples_per_s =
// batch / median.
// GEMMs (bench "gemm"): C[n,n] = A B through Device::gemm in each --gemm-types operand type, else in
// each --precision's (fp32 when neither is given); GFLOP/s of the best of 3 timed batches.
// Rows that could not be measured still come out, with ms_per_step null and "skipped" (the
// device does not hold the precision's type) or "error" (the message); the exit status is then
// 1 for an error, 0 for skips only, so one failed precision does not cost the others.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <tuple>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/idx.h"
#include "trident/core/json.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"
#include "trident/models/precision.h"
#include "trident/models/predictor.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "bench_models.h"

namespace {

using trident::Device;

using trident::DType;
using trident::Precision;

// A GEMM operand combination: A and B of one type, C float32 or that type; "tf32" is float32
// with GemmArgs::allow_tf32.
struct GemmType {
  std::string name;  // fp32, tf32, bf16, bf16-f32, fp16, fp16-f32
  Precision precision = Precision::fp32;
  DType ab = DType::f32, c = DType::f32;
};

GemmType parse_gemm_type(const std::string& name) {
  GemmType t;
  t.name = name;
  const std::string base = name.size() > 4 && name.compare(name.size() - 4, 4, "-f32") == 0
                               ? name.substr(0, name.size() - 4)
                               : name;
  const bool f32_out = base != name;
  if (base == "fp32" || base == "tf32") {
    if (f32_out) throw trident::UsageError("--gemm-types '" + name + "': " + base + " has float32 C already");
    t.precision = base == "tf32" ? Precision::tf32 : Precision::fp32;
  } else if (base == "bf16" || base == "fp16") {
    t.precision = trident::parse_precision(base);
    t.ab = trident::compute_dtype(t.precision);
    t.c = f32_out ? DType::f32 : t.ab;
  } else {
    throw trident::UsageError("--gemm-types '" + name +
                              "' is not one of fp32, tf32, bf16, bf16-f32, fp16, fp16-f32");
  }
  return t;
}

struct Options {
  std::string device, devices, models, data = "auto";
  int64_t batch = 0, big_batch = 0, steps = 0, epochs = 4;
  // Training precisions; nullopt: TrainOptions' default (TRIDENT_PRECISION, else fp32).
  std::vector<std::optional<Precision>> precisions = {std::nullopt};
  std::vector<int64_t> gemm_sizes;
  std::vector<std::string> gemm_shapes;  // "200x512x784nt": these instead of the square sizes
  // GEMM operand types; empty: the --precision list (fp32 where none was given).
  std::vector<GemmType> gemm_types;
  double gemm_seconds = 0.3;             // length of each of the 3 timed GEMM batches
  std::vector<int64_t> inference_batches = {1, 1000};
  bool train = true, gemm = true, capture = true, inference = false, list_devices = false;
};

const char* kUsage =
    "usage: trident_bench [--device ID] [--models mlp,cnn,mlp-big,resnet] [--batch N]\n"
    "                     [--big-batch N] [--steps N] [--epochs N] [--precision LIST]\n"
    "                     [--gemm-sizes 256,512,...] [--gemm-types LIST] [--gemm] [--no-train]\n"
    "                     [--no-gemm] [--no-capture] [--data DIR|synthetic]\n"
    "                     [--gemm-shapes MxNxK[nn|nt|tn|tt],...]\n"
    "       trident_bench --devices cuda:0,cuda:1 [--models mlp-big] [--batch 512]\n"
    "       trident_bench --list-devices\n"
    "  --device     one device (default: the best, as TRIDENT_BACKEND / the registry choose)\n"
    "  --devices    weak scaling over the first 1..N devices of the list, batch per device fixed\n"
    "  --models     models to train (mlp,cnn,mlp-big; any of the zoo's, resnet included, or the\n"
    "               bench's own resnet9: ResNet-9 on 3x32x32, bench/bench_models.h)\n"
    "  --batch      batch per device (default: the model's recipe, 200; resnet 256); mlp-big\n"
    "               on CPUs too\n"
    "  --big-batch  batch for mlp-big (default: 512 on GPUs, --batch on CPUs)\n"
    "  --steps      steps per epoch (default by device type and model)\n"
    "  --epochs     epochs in all; the first is warm-up (4)\n"
    "  --precision  train each model in each of these (fp32,tf32,bf16,fp16; default:\n"
    "               TRIDENT_PRECISION, else fp32); a type the device does not hold: a skipped row\n"
    "  --gemm       GEMMs only (no training)\n"
    "  --gemm-types operand types of the timed GEMMs (default: the --precision list, else\n"
    "               fp32): fp32, tf32 (float32 with TF32 tensor cores), bf16 / fp16 (A, B and C\n"
    "               16-bit, float32 accumulation), bf16-f32 / fp16-f32 (C float32)\n"
    "  --gemm-shapes  time these GEMMs (t: that operand stored transposed) instead of the\n"
    "               square sizes\n"
    "  --gemm-ms    milliseconds per timed GEMM batch (300; best of 3)\n"
    "  --inference  also time inference (Predictor) of each model at --inference-batches\n"
    "               (1,1000): latency from host inputs to host outputs\n"
    "  --list-devices  print each device the registry found (id, name, type) and exit\n";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t to_int(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used == value.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw trident::UsageError(name + " '" + value + "' is not a positive integer");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw trident::UsageError(a + " needs a value\n" + kUsage);
      return argv[++i];
    };
    if (a == "--device") o.device = value();
    else if (a == "--devices") o.devices = value();
    else if (a == "--models" || a == "--model") o.models = value();
    else if (a == "--batch") o.batch = to_int(a, value());
    else if (a == "--big-batch") o.big_batch = to_int(a, value());
    else if (a == "--steps") o.steps = to_int(a, value());
    else if (a == "--epochs") o.epochs = std::max<int64_t>(2, to_int(a, value()));
    else if (a == "--data") o.data = value();
    else if (a == "--precision" || a == "--precisions") {
      o.precisions.clear();
      for (auto& p : split(value())) {
        try {
          o.precisions.push_back(trident::parse_precision(p));
        } catch (const trident::UsageError& e) {
          throw trident::UsageError(a + ": " + e.what());
        }
      }
      if (o.precisions.empty()) throw trident::UsageError(a + " needs at least one precision");
    }
    else if (a == "--gemm") o.train = false, o.inference = false, o.gemm = true;
    else if (a == "--gemm-types") {
      o.gemm_types.clear();
      for (auto& t : split(value())) o.gemm_types.push_back(parse_gemm_type(t));
      if (o.gemm_types.empty()) throw trident::UsageError(a + " needs at least one type");
    }
    else if (a == "--gemm-shapes") o.gemm_shapes = split(value());
    else if (a == "--gemm-ms") o.gemm_seconds = double(to_int(a, value())) / 1000.0;
    else if (a == "--gemm-sizes") for (auto& s : split(value())) o.gemm_sizes.push_back(to_int(a, s));
    else if (a == "--no-train") o.train = false;
    else if (a == "--no-gemm") o.gemm = false;
    else if (a == "--no-capture") o.capture = false;
    else if (a == "--inference") o.inference = true;
    else if (a == "--inference-batches") {
      o.inference_batches.clear();
      for (auto& b : split(value())) o.inference_batches.push_back(to_int(a, b));
    }
    else if (a == "--list-devices") o.list_devices = true;
    else if (a == "--help" || a == "-h") { std::cout << kUsage; std::exit(0); }
    else throw trident::UsageError("unknown option '" + a + "'\n" + kUsage);
  }
  return o;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One measurement line; every line carries the same fields (null where they do not apply), and
// "skipped" or "error" where the measurement did not happen.
struct Record {
  std::string bench, model, device, device_name;
  int64_t batch = 0, n_devices = 1, size = 0, steps = 0;
  double ms_per_step = -1, ms_per_step_min = -1, samples_per_s = -1, gflops = -1;
  bool capture = false;
  // Training: the run's precision; GEMM: the operand type (fp32, tf32, bf16, fp16), C's type in
  // out_dtype. Inference runs in float32.
  std::string precision = "fp32", out_dtype;
  // The op families that computed through float32 staging instead of natively in the 16-bit
  // type (none in float32): a 16-bit row with staged families measures conversions too.
  std::vector<std::string> staged;
  double train_loss = NAN, loss_scale = NAN;  // training: the last epoch's mean loss; fp16's scale
  std::string skipped, error;
};

void emit(const Record& r) {
  // Through Trident's one JSON writer: strings escaped, a NaN or infinite time written as null.
  trident::json::ObjectWriter line;
  const auto number_or_null = [&](const char* key, double v) {
    if (v < 0) line.number(key, NAN);  // -1: does not apply
    else line.number(key, v);
  };
  line.string("impl", "trident").string("bench", r.bench).string("model", r.model).string("device", r.device)
      .string("device_name", r.device_name).integer("batch", r.batch).integer("n_devices", r.n_devices)
      .integer("size", r.size).integer("steps", r.steps).boolean("capture", r.capture);
  number_or_null("ms_per_step", r.ms_per_step);
  number_or_null("ms_per_step_min", r.ms_per_step_min);
  number_or_null("samples_per_s", r.samples_per_s);
  number_or_null("gflops", r.gflops);
  line.string("precision", r.precision);
  if (!r.out_dtype.empty()) line.string("out_dtype", r.out_dtype);
  line.strings("staged", r.staged).number("train_loss", r.train_loss).number("loss_scale", r.loss_scale);
  if (!r.skipped.empty()) line.string("skipped", r.skipped);
  if (!r.error.empty()) line.string("error", r.error);
  std::cout << line.str() << std::endl;
}

// The op families of `dtype` that `d` stages through float32 (empty for float32).
std::vector<std::string> staged_families(const Device& d, DType dtype) {
  using trident::OpFamily;
  static const std::pair<OpFamily, const char*> kFamilies[] = {
      {OpFamily::gemm, "gemm"},       {OpFamily::elementwise, "elementwise"},
      {OpFamily::channel, "channel"}, {OpFamily::conv2d, "conv2d"},
      {OpFamily::pool, "pool"},       {OpFamily::batchnorm, "batchnorm"},
      {OpFamily::head, "head"},       {OpFamily::gather, "gather"}};
  std::vector<std::string> out;
  for (const auto& [family, name] : kFamilies)
    if (!d.native(family, dtype)) out.push_back(name);
  return out;
}

// Why `d` cannot run `dtype` at all ("" when it can).
std::string unsupported_reason(const Device& d, DType dtype) {
  if (d.supports(dtype)) return "";
  return d.info().id() + " (" + d.info().backend + " backend) holds no " + trident::dtype_name(dtype) +
         " tensors";
}

bool is_gpu(const Device& d) { return d.info().type == "gpu"; }

// The recipe of `model`: one of the bench's own models (bench_models.h) or the zoo's; an unknown
// name is a UsageError naming both lists.
const trident::ModelRecipe& recipe_for(const std::string& model) {
  if (const auto* m = trident_bench::find_bench_model(model)) return m->recipe;
  for (const trident::ModelRecipe& r : trident::model_zoo())
    if (r.name == model) return r;
  std::string names = trident::model_names();
  for (const auto& m : trident_bench::bench_models()) names += ", " + m.recipe.name;
  throw trident::UsageError("unknown model '" + model + "' (" + names + ")");
}

// One sample of `model`'s input: the bench model's, else a Fashion-MNIST image.
trident::Shape sample_shape_for(const std::string& model) {
  if (const auto* m = trident_bench::find_bench_model(model)) return m->sample;
  return {1, 28, 28};
}

// `count` training samples of `sample` shape: Fashion-MNIST (or --data DIR) repeated to that
// size, else (and for samples of another size) synthetic byte images with random labels. Only
// the amount of resident data matters for speed.
trident::DatasetSplits bench_data(const std::string& source, int64_t count,
                                  const trident::Shape& sample) {
  trident::Dataset real;
  std::string where = "(synthetic)";
  const int64_t numel = trident::shape_numel(sample);
  if (source != "synthetic" && numel == 784) {
    const std::string dir = source == "auto" ? trident::default_data_directory() : source;
    try {
      trident::DatasetLoadOptions limits;
      limits.train_limit = count;
      real = trident::load_idx_directory(dir, limits).train;
      where = dir;
    } catch (const trident::Error& e) {
      if (source != "auto") throw;
      std::cerr << "trident_bench: " << e.what() << "; using synthetic data\n";
    }
  }
  std::vector<uint8_t> images(static_cast<size_t>(count * numel));
  std::vector<int32_t> labels(static_cast<size_t>(count));
  uint32_t state = 12345;
  auto next = [&] { state = state * 1664525u + 1013904223u; return state >> 8; };
  const bool have_real = real.size() > 0 && real.dtype() == trident::DType::u8 &&
                         real.sample_numel() == 784;
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* row = &images[static_cast<size_t>(i * numel)];
    if (have_real) {
      const int64_t src = i % real.size();
      std::copy_n(real.uint8_data() + src * 784, 784, row);
      labels[static_cast<size_t>(i)] = real.labels()[static_cast<size_t>(src)];
    } else {
      for (int64_t p = 0; p < numel; ++p) row[p] = static_cast<uint8_t>(next() & 0xFF);
      labels[static_cast<size_t>(i)] = static_cast<int32_t>(next() % 10);
    }
  }
  trident::DatasetSplits splits;
  const int64_t test_count = std::min<int64_t>(count, 1000);
  std::vector<uint8_t> test_images(images.begin(), images.begin() + test_count * numel);
  std::vector<int32_t> test_labels(labels.begin(), labels.begin() + test_count);
  // The bench never evaluates; one small test split keeps the Trainer happy.
  splits.train = trident::Dataset(std::move(images), sample, std::move(labels), 10);
  splits.test = trident::Dataset(std::move(test_images), sample, std::move(test_labels), 10);
  splits.source = where;
  return splits;
}

int64_t default_steps(const std::vector<Device*>& devices, const std::string& model) {
  if (model == "resnet9") return is_gpu(*devices[0]) ? 50 : 2;
  if (is_gpu(*devices[0])) return model == "mlp-big" || model == "resnet" ? 200 : 500;
  if (model == "mlp-big") return 6;
  if (model == "resnet") return 4;
  return model == "cnn" ? 40 : 100;
}

// bench_data, kept per (source, count, sample): a model trained in four precisions reads it once.
trident::DatasetSplits cached_bench_data(const std::string& source, int64_t count,
                                         const trident::Shape& sample) {
  using Key = std::tuple<std::string, int64_t, trident::Shape>;
  static std::map<Key, trident::DatasetSplits> cache;
  const Key key{source, count, sample};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, bench_data(source, count, sample)).first;
  return it->second;
}

// The row of a training run that did not happen, with the reason.
Record unmeasured_training(const Options& o, const std::vector<Device*>& devices,
                           const std::string& model, int64_t batch_per_device,
                           std::optional<Precision> precision) {
  Record r;
  r.bench = devices.size() > 1 || !o.devices.empty() ? "scaling" : "train";
  r.model = model;
  for (const Device* d : devices) r.device += (r.device.empty() ? "" : ",") + d->info().id();
  r.device_name = devices[0]->info().name;
  r.batch = batch_per_device;
  r.n_devices = static_cast<int64_t>(devices.size());
  r.capture = o.capture;
  r.precision = precision ? trident::precision_name(*precision) : "default";
  return r;
}

// Trains `model` on `devices` (batch per device) in `precision` and reports the timed epochs.
Record measure_training(const Options& o, const std::vector<Device*>& devices,
                        const std::string& model, int64_t batch_per_device,
                        std::optional<Precision> precision) {
  const int64_t n = static_cast<int64_t>(devices.size());
  const int64_t steps = o.steps > 0 ? o.steps : default_steps(devices, model);
  // The model's recipe (optimizer, schedule, loss, normalisation): the step a user trains.
  const trident::ModelRecipe& recipe = recipe_for(model);
  trident::TrainOptions t;
  t.batch = batch_per_device * n;
  t.optimizer = recipe.optimizer;
  t.schedule = recipe.schedule;
  t.loss = recipe.loss;
  t.epochs = o.epochs;
  t.capture = o.capture;
  t.precision = precision;
  trident::DatasetSplits data = cached_bench_data(o.data, t.batch * steps, sample_shape_for(model));
  for (trident::Dataset* split : {&data.train, &data.test})
    split->set_normalization({true, {recipe.mean}, {recipe.std}});
  trident::Trainer trainer(devices, recipe.factory(), data, t);
  trainer.train_epoch();  // warm-up: allocation, capture, caches, clocks
  std::vector<double> ms;
  double last_loss = NAN;
  for (int64_t e = 1; e < o.epochs; ++e) {
    const trident::EpochStats stats = trainer.train_epoch();
    ms.push_back(stats.seconds * 1e3 / static_cast<double>(steps));
    last_loss = stats.train_loss;
  }
  std::sort(ms.begin(), ms.end());
  Record r;
  r.bench = n > 1 || !o.devices.empty() ? "scaling" : "train";
  r.model = model;
  r.device = trainer.device_names();
  r.device_name = devices[0]->info().name;
  r.batch = batch_per_device;
  r.n_devices = n;
  r.steps = steps;
  r.capture = o.capture;
  r.ms_per_step = ms[ms.size() / 2];
  r.ms_per_step_min = ms.front();
  r.samples_per_s = static_cast<double>(t.batch) * 1e3 / r.ms_per_step;
  r.precision = trident::precision_name(trainer.precision());
  r.staged = staged_families(*devices[0], trident::compute_dtype(trainer.precision()));
  r.train_loss = last_loss;
  if (trident::uses_loss_scaling(trainer.precision())) r.loss_scale = trainer.loss_scale();
  return r;
}

// measure_training, or the row saying why it did not run: a precision whose type a device does
// not hold is skipped; a failure is recorded (and sets `failed`) and the next run goes on.
Record try_training(const Options& o, const std::vector<Device*>& devices, const std::string& model,
                    int64_t batch_per_device, std::optional<Precision> precision, bool& failed) {
  if (precision)
    for (const Device* d : devices) {
      const std::string why = unsupported_reason(*d, trident::compute_dtype(*precision));
      if (!why.empty()) {
        Record r = unmeasured_training(o, devices, model, batch_per_device, precision);
        r.skipped = why;
        return r;
      }
    }
  try {
    return measure_training(o, devices, model, batch_per_device, precision);
  } catch (const trident::Error& e) {
    std::cerr << "trident_bench: " << model << " " << (precision ? trident::precision_name(*precision) : "")
              << ": " << e.what() << "\n";
    failed = true;
    Record r = unmeasured_training(o, devices, model, batch_per_device, precision);
    r.error = e.what();
    return r;
  }
}

// Inference of `model` at `batch` through a Predictor: host float inputs -> host outputs.
Record measure_inference(const Options& o, Device& d, const std::string& model, int64_t batch) {
  const trident::ModelRecipe& recipe = recipe_for(model);
  const trident::Shape sample = sample_shape_for(model);
  trident::Network net = recipe.make(10);
  net.build(d, sample, 1, /*training=*/false);  // random weights: the speed is the same
  trident::PredictorOptions options;
  options.max_batch = batch;
  options.capture = o.capture;
  trident::Predictor predictor(std::move(net), options);
  std::vector<float> inputs(static_cast<size_t>(batch * trident::shape_numel(sample)));
  uint32_t state = 12345;
  for (auto& x : inputs) {
    state = state * 1664525u + 1013904223u;
    x = (state >> 8) / 8388608.0f - 1.0f;  // about what normalised images hold
  }
  for (int i = 0; i < 3; ++i) predictor.outputs(inputs.data(), batch);  // eager, capture, replay
  std::vector<double> ms;
  const double start = now_seconds();
  while (ms.size() < 5 || (now_seconds() - start < 1.0 && ms.size() < 2000)) {
    const double t0 = now_seconds();
    predictor.outputs(inputs.data(), batch);
    ms.push_back((now_seconds() - t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  Record r;
  r.bench = "inference";
  r.model = model;
  r.device = d.info().id();
  r.device_name = d.info().name;
  r.batch = batch;
  r.steps = static_cast<int64_t>(ms.size());
  r.capture = o.capture && predictor.captured_batch_sizes() > 0;
  r.ms_per_step = ms[ms.size() / 2];
  r.ms_per_step_min = ms.front();
  r.samples_per_s = static_cast<double>(batch) * 1e3 / r.ms_per_step;
  return r;
}

// One GEMM shape: C[m,n] = op(A) op(B), op(A) [m,k], op(B) [k,n], transposed as stored or not.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
           (trans_a ? "t" : "n") + (trans_b ? "t" : "n");
  }
};

// "MxNxK" with an optional "nn"/"nt"/"tn"/"tt" suffix (A then B: t = stored transposed).
GemmShape parse_gemm_shape(const std::string& text) {
  GemmShape s;
  std::string dims = text;
  if (dims.size() > 2 && (dims.back() == 'n' || dims.back() == 't')) {
    s.trans_b = dims.back() == 't';
    s.trans_a = dims[dims.size() - 2] == 't';
    if (dims[dims.size() - 2] != 'n' && !s.trans_a)
      throw trident::UsageError("--gemm-shapes '" + text + "': the suffix is nn, nt, tn or tt");
    dims.resize(dims.size() - 2);
  }
  const std::vector<std::string> parts = [&] {
    std::vector<std::string> out;
    std::stringstream ss(dims);
    for (std::string item; std::getline(ss, item, 'x');) out.push_back(item);
    return out;
  }();
  if (parts.size() != 3)
    throw trident::UsageError("--gemm-shapes '" + text + "' is not MxNxK[nn|nt|tn|tt]");
  s.m = to_int("--gemm-shapes", parts[0]);
  s.n = to_int("--gemm-shapes", parts[1]);
  s.k = to_int("--gemm-shapes", parts[2]);
  return s;
}

// The row of a GEMM of `type`: "sgemm" for float32 operands (TF32 included), "gemm" for 16-bit
// ones, then " MxNxKnn" for a --gemm-shapes shape.
Record gemm_record(const Device& d, const GemmShape& shape, const GemmType& type, bool named_shape) {
  Record r;
  r.bench = "gemm";
  r.model = std::string(type.ab == DType::f32 ? "sgemm" : "gemm") + (named_shape ? " " + shape.name() : "");
  r.device = d.info().id();
  r.device_name = d.info().name;
  r.size = shape.n;
  r.precision = trident::precision_name(type.precision);
  r.out_dtype = trident::dtype_name(type.c);
  if (!d.native(trident::OpFamily::gemm, type.ab)) r.staged = {"gemm"};
  return r;
}

// C = op(A) op(B) through Device::gemm with A, B, C of `type`, best of 3 timed batches lasting
// about `seconds` each.
Record measure_gemm(Device& d, const GemmShape& shape, const GemmType& type, double seconds,
                    bool named_shape) {
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  auto random_matrix = [&](int64_t count, uint32_t state) {
    std::vector<float> host(static_cast<size_t>(count));
    for (auto& x : host) { state = state * 1664525u + 1013904223u; x = (state >> 8) / 8388608.0f - 1.0f; }
    return trident::Tensor::from_host(d, {count}, host, type.ab);
  };
  const trident::Tensor a = random_matrix(m * k, 1), b = random_matrix(k * n, 2);
  const trident::Tensor c = trident::Tensor::empty(d, {m, n}, type.c);
  trident::GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.trans_a = shape.trans_a, g.trans_b = shape.trans_b;
  g.a = a, g.b = b, g.c = c;
  g.lda = shape.trans_a ? m : k;
  g.ldb = shape.trans_b ? k : n;
  g.ldc = n;
  g.allow_tf32 = type.precision == Precision::tf32;
  auto run = [&](int64_t reps) {
    d.synchronize();
    const double t0 = now_seconds();
    for (int64_t i = 0; i < reps; ++i) d.gemm(g);
    d.synchronize();
    return now_seconds() - t0;
  };
  run(2);  // warm-up: library handles, kernel selection, clocks
  const double once = std::max(run(1), 1e-6);
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(seconds / once));
  double best = 1e30;
  for (int i = 0; i < 3; ++i) best = std::min(best, run(reps) / static_cast<double>(reps));
  Record r = gemm_record(d, shape, type, named_shape);
  r.steps = reps;
  r.ms_per_step = best * 1e3;
  r.gflops = 2.0 * static_cast<double>(m) * n * k / best / 1e9;
  return r;
}

// measure_gemm, or the row saying why not (a type the device does not hold: skipped; a failure:
// recorded, `failed` set).
Record try_gemm(Device& d, const GemmShape& shape, const GemmType& type, double seconds,
                bool named_shape, bool& failed) {
  Record r = gemm_record(d, shape, type, named_shape);
  r.skipped = unsupported_reason(d, type.ab);
  if (!r.skipped.empty()) return r;
  try {
    return measure_gemm(d, shape, type, seconds, named_shape);
  } catch (const trident::Error& e) {
    std::cerr << "trident_bench: GEMM " << shape.name() << " " << type.name << ": " << e.what() << "\n";
    failed = true;
    r.error = e.what();
    return r;
  }
}

// One line per device: {"id": "cuda:0", "name": ..., "type": "gpu", "backend": "cuda"}.
void list_devices(const trident::DeviceRegistry& registry) {
  for (const Device* d : registry.all_devices()) {
    trident::json::ObjectWriter line;
    line.string("id", d->info().id()).string("name", d->info().name).string("type", d->info().type)
        .string("backend", d->info().backend);
    std::cout << line.str() << std::endl;
  }
}

// The batch `model` trains with on `d`: for mlp-big --big-batch, else 512 on GPUs; for the
// others (and mlp-big on CPUs) --batch, else the model's recipe (200; resnet 256).
int64_t training_batch(const Options& o, const Device& d, const std::string& model) {
  const int64_t batch = o.batch > 0 ? o.batch : recipe_for(model).batch;
  if (model != "mlp-big") return batch;
  return o.big_batch > 0 ? o.big_batch : (is_gpu(d) ? 512 : batch);
}

int run(const Options& o) {
  auto& registry = trident::DeviceRegistry::global();
  if (o.list_devices) {
    list_devices(registry);
    return 0;
  }
  bool failed = false;
  if (!o.devices.empty()) {  // weak scaling over the first 1..N devices of the list
    const std::vector<Device*> all = registry.device_list(o.devices);
    const int64_t batch = o.batch > 0 ? o.batch : (is_gpu(*all[0]) ? 512 : 200);
    for (const std::string& model : split(o.models.empty() ? "mlp-big" : o.models))
      for (const auto& precision : o.precisions)
        for (size_t n = 1; n <= all.size(); ++n)
          emit(try_training(o, std::vector<Device*>(all.begin(), all.begin() + n), model, batch,
                            precision, failed));
    return failed ? 1 : 0;
  }
  Device& d = o.device.empty() ? registry.default_device() : registry.device(o.device);
  std::cerr << "trident_bench on " << d.info().id() << " (" << d.info().name << ")\n";
  if (o.train)
    for (const std::string& model : split(o.models.empty() ? "mlp,cnn,mlp-big" : o.models)) {
      recipe_for(model);  // an unknown name is a usage error, not a failed row
      for (const auto& precision : o.precisions)
        emit(try_training(o, {&d}, model, training_batch(o, d, model), precision, failed));
    }
  if (o.inference)
    for (const std::string& model : split(o.models.empty() ? "mlp,cnn,resnet" : o.models))
      for (int64_t batch : o.inference_batches) emit(measure_inference(o, d, model, batch));
  std::vector<GemmType> gemm_types = o.gemm_types;
  if (gemm_types.empty())
    for (const auto& precision : o.precisions)
      gemm_types.push_back(parse_gemm_type(precision ? trident::precision_name(*precision) : "fp32"));
  for (const std::string& text : o.gemm_shapes)
    for (const GemmType& type : gemm_types)
      emit(try_gemm(d, parse_gemm_shape(text), type, o.gemm_seconds, true, failed));
  if (o.gemm && o.gemm_shapes.empty()) {
    std::vector<int64_t> sizes = o.gemm_sizes;
    if (sizes.empty())
      sizes = is_gpu(d) ? std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192}
                        : std::vector<int64_t>{256, 512, 1024, 2048};
    for (const GemmType& type : gemm_types)
      for (int64_t n : sizes) emit(try_gemm(d, GemmShape{n, n, n}, type, o.gemm_seconds, false, failed));
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const trident::UsageError& e) {
    std::cerr << "trident_bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "trident_bench: " << e.what() << "\n";
    return 1;
  }
}
