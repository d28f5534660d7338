// Predictor: inference-only networks, batches bucketed by size, captured forwards, probabilities.
#include "trident/models/predictor.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/finite.h"
#include "trident/core/log.h"
#include "trident/models/state_dict.h"

namespace trident {
namespace {

// A sample shape as the [C, H, W] that gather_samples reads (as the Trainer views it).
Shape image_shape(const Shape& sample) {
  if (sample.size() == 3) return sample;
  if (sample.size() == 2) return {1, sample[0], sample[1]};
  if (sample.size() == 1) return {1, 1, sample[0]};
  throw ShapeError("samples of shape " + shape_string(sample) +
                   " are not supported: use [C, H, W], [H, W] or [features]");
}

Shape with_batch(int64_t batch, const Shape& sample) {
  Shape s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// One value per channel from a Normalization list (empty: `fallback`; one value: every channel).
std::vector<float> per_channel(const std::vector<float>& values, int64_t channels, float fallback,
                               const char* what) {
  if (!values.empty() && values.size() != 1 && int64_t(values.size()) != channels)
    throw UsageError(std::string("the normalisation's ") + what + " has " +
                     std::to_string(values.size()) + " values for images of " +
                     std::to_string(channels) + " channels");
  std::vector<float> out(static_cast<size_t>(channels), fallback);
  for (int64_t c = 0; c < channels; ++c)
    if (!values.empty()) out[size_t(c)] = values[values.size() == 1 ? 0 : size_t(c)];
  return out;
}

}  // namespace

Predictor::Predictor(const ModelFactory& factory, Device& device, const std::string& weights_path,
                     PredictorOptions options) {
  if (!factory) throw UsageError("Predictor: no model factory");
  network_ = factory();
  const TensorFile file = load_safetensors(weights_path);
  const Shape sample = !options.sample_shape.empty()
                           ? options.sample_shape
                           : file_sample_shape(file, weights_path).value_or(Shape{1, 28, 28});
  network_.build(device, sample, 0, /*training=*/false);
  load_weights(network_, file, weights_path, /*strict=*/true);
  init(options);
}

Predictor::Predictor(Network network, PredictorOptions options) : network_(std::move(network)) {
  if (!network_.built())
    throw UsageError("Predictor: model '" + network_.model_name() +
                     "' is not built (build it and load its weights first, or give the "
                     "Predictor a factory and a weights file)");
  init(options);
}

void Predictor::init(const PredictorOptions& options) {
  options_ = options;
  if (options_.max_batch < 1) throw UsageError("Predictor: max_batch must be at least 1");
  const Shape& out = network_.output_sample_shape();
  if (out.size() != 1)
    throw ShapeError("model '" + network_.model_name() + "' gives outputs of shape " +
                     shape_string(out) + " per sample; a classifier's output is [classes]");
  classes_ = out[0];
  image_shape_ = image_shape(network_.sample_shape());
  const Normalization& norm = options_.normalization;
  std::vector<float> mean = per_channel(norm.mean, image_shape_[0], 0.0f, "mean");
  std::vector<float> std = per_channel(norm.std, image_shape_[0], 1.0f, "std");
  std::vector<float> inv_std(std.size());
  for (size_t c = 0; c < std.size(); ++c) {
    if (!(std[c] > 0.0f) || !std::isfinite(std[c]) || !std::isfinite(mean[c]))
      throw UsageError("the normalisation of channel " + std::to_string(c) +
                       " must have a finite mean and a positive std");
    inv_std[c] = 1.0f / std[c];  // as the Trainer uploads it: gather_samples multiplies
  }
  Device& d = device();
  mean_ = Tensor::from_host(d, {image_shape_[0]}, mean);
  inv_std_ = Tensor::from_host(d, {image_shape_[0]}, inv_std);
  step_state_ = Tensor::zeros(d, {kStepStateCount}, DType::i32);
}

Predictor::~Predictor() {
  // Recordings first (a CUDA graph refers to the buffers), then the queued work finishes.
  for (auto& [rows, batch] : batches_)
    for (auto& captured : batch.captured) captured.reset();
  try {
    if (network_.built()) network_.device().synchronize();
  } catch (const std::exception& e) {  // a destructor reports, never throws
    log_warning(std::string("Predictor: ") + e.what());
  }
}

int64_t Predictor::sample_numel() const { return shape_numel(network_.sample_shape()); }

size_t Predictor::captured_batch_sizes() const {
  size_t n = 0;
  for (const auto& [rows, batch] : batches_) n += batch.captured[0] || batch.captured[1];
  return n;
}

int64_t Predictor::bucket_for(int64_t rows) const {
  int64_t bucket = 1;
  while (bucket < rows) bucket *= 2;
  return std::min(bucket, options_.max_batch);
}

std::vector<float> Predictor::outputs(const float* samples, int64_t count) {
  const int64_t n = sample_numel();
  if (count > 0 && samples != nullptr) {
    const int64_t i = first_non_finite(samples, count * n);
    if (i >= 0)
      throw UsageError("sample " + std::to_string(i / n) + " holds " +
                       (std::isnan(samples[i]) ? "NaN" : "an infinity") + " at element " +
                       std::to_string(i % n) + "; inputs must be finite");
  }
  return run(kFloat, samples, count);
}

std::vector<float> Predictor::outputs(const uint8_t* images, int64_t count) {
  return run(kBytes, images, count);
}

std::vector<float> Predictor::run(Kind kind, const void* samples, int64_t count) {
  if (count < 0) throw UsageError("Predictor: a negative sample count");
  if (count > 0 && samples == nullptr) throw UsageError("Predictor: no sample data");
  std::vector<float> out(static_cast<size_t>(count * classes_));
  const size_t sample_bytes =
      static_cast<size_t>(sample_numel()) * (kind == kFloat ? sizeof(float) : 1);
  const auto* bytes = static_cast<const uint8_t*>(samples);
  for (int64_t first = 0; first < count; first += options_.max_batch) {
    const int64_t rows = std::min(options_.max_batch, count - first);
    run_batch(kind, bytes + static_cast<size_t>(first) * sample_bytes, rows, bucket_for(rows),
              out.data() + first * classes_);
  }
  return out;
}

void Predictor::run_batch(Kind kind, const uint8_t* samples, int64_t rows, int64_t bucket,
                          float* out) {
  Device& d = device();
  Batch& b = batches_[bucket];
  const Tensor input = network_.input_buffer(bucket);
  if (kind == kBytes && !b.images.defined()) {
    b.images = Tensor::empty(d, with_batch(bucket, image_shape_), DType::u8);
    std::vector<int32_t> order(static_cast<size_t>(bucket));
    std::iota(order.begin(), order.end(), 0);
    b.table = Tensor::from_host(d, {bucket}, order);
  }
  // Float inputs of a 16-bit network arrive in float32 and are converted by the forward.
  const bool convert_input = kind == kFloat && input.dtype() != DType::f32;
  if (convert_input && !b.floats.defined())
    b.floats = Tensor::empty(d, input.shape(), DType::f32);
  // The inputs into the persistent buffer, outside any capture; rows past the request are
  // zeroed on the device (not padded on the host: a copy of the whole bucket).
  const Tensor& target = kind == kBytes ? b.images : convert_input ? b.floats : input;
  const size_t row_bytes = target.bytes() / static_cast<size_t>(bucket);
  const int64_t row_numel = target.numel() / bucket;
  Shape row_shape(target.shape().begin() + 1, target.shape().end());
  target.view(0, with_batch(rows, row_shape))
      .copy_from_host(samples, static_cast<size_t>(rows) * row_bytes);
  if (rows < bucket)
    d.fill(target.view(rows * row_numel, with_batch(bucket - rows, row_shape)), 0.0f);
  StepContext ctx;
  ctx.device = &d;
  ctx.step_state = step_state_;
  ctx.training = false;
  ctx.beside = env_flag("TRIDENT_OVERLAP", true);
  // Everything by value (the buffers are persistent): the step may be kept and run again.
  Batch* batch = &b;
  auto forward = [this, batch, kind, bucket, ctx, input, convert_input] {
    if (kind == kBytes) {
      SampleTransform t;  // normalisation only
      t.scale = options_.normalization.divide_by_255 ? 1.0f / 255.0f : 1.0f;
      t.mean = mean_;
      t.inv_std = inv_std_;
      ctx.device->gather_samples(batch->images, batch->table, step_state_, t,
                                 input.reshape(with_batch(bucket, image_shape_)));
    }
    if (convert_input) ctx.device->convert(batch->floats, input);
    const Tensor& output = network_.forward(ctx, input);
    if (output.dtype() == DType::f32) {
      batch->output = output;
      return;
    }
    if (!batch->output.defined() || batch->output.shape() != output.shape())
      batch->output = Tensor::empty(*ctx.device, output.shape(), DType::f32);
    ctx.device->convert(output, batch->output);
  };
  // The first run of a size allocates its buffers (eagerly); the second records it, once.
  if (b.captured[kind]) {
    b.captured[kind]->replay();
  } else if (options_.capture && b.runs[kind] > 0 && !b.capture_tried[kind]) {
    b.capture_tried[kind] = true;
    b.captured[kind] = d.capture(forward);
    if (b.captured[kind]) b.captured[kind]->replay(); else forward();
  } else {
    forward();
  }
  ++b.runs[kind];
  b.output.view(0, {rows, classes_})
      .to_host(out, static_cast<size_t>(rows * classes_) * sizeof(float));
}

std::vector<float> Predictor::softmax_rows(const std::vector<float>& outputs, int64_t classes) {
  std::vector<float> p(outputs.size());
  for (size_t row = 0; row + size_t(classes) <= outputs.size(); row += size_t(classes)) {
    const float* x = outputs.data() + row;
    const double top = *std::max_element(x, x + classes);
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(x[c]) - top);
    for (int64_t c = 0; c < classes; ++c)
      p[row + size_t(c)] = static_cast<float>(std::exp(double(x[c]) - top) / sum);
  }
  return p;
}

std::vector<Prediction> Predictor::top_k(const std::vector<float>& probabilities, int64_t classes,
                                         int64_t k) {
  if (classes < 1) throw UsageError("top_k: no classes");
  k = std::max<int64_t>(1, std::min(k, classes));
  std::vector<Prediction> out;
  std::vector<int64_t> order(static_cast<size_t>(classes));
  for (size_t row = 0; row + size_t(classes) <= probabilities.size(); row += size_t(classes)) {
    const float* p = probabilities.data() + row;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    Prediction pred;
    for (int64_t i = 0; i < k; ++i) {
      pred.classes.push_back(order[size_t(i)]);
      pred.probabilities.push_back(p[order[size_t(i)]]);
    }
    out.push_back(std::move(pred));
  }
  return out;
}

std::vector<float> Predictor::probabilities(const float* samples, int64_t count) {
  return softmax_rows(outputs(samples, count), classes_);
}

std::vector<float> Predictor::probabilities(const uint8_t* images, int64_t count) {
  return softmax_rows(outputs(images, count), classes_);
}

std::vector<Prediction> Predictor::predict(const float* samples, int64_t count, int64_t k) {
  return top_k(probabilities(samples, count), classes_, k);
}

std::vector<Prediction> Predictor::predict(const uint8_t* images, int64_t count, int64_t k) {
  return top_k(probabilities(images, count), classes_, k);
}

}  // namespace trident
