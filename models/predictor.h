// Predictor: a network run for inference on any device. Built for inference only (no gradient
// buffers, no optimizer state, batch norm on its running statistics, dropout off), it takes
// batches of any size, as float32 model inputs or as uint8 images it normalises itself, and
// returns the outputs, the class probabilities and the top-k classes.
//
//   PredictorOptions options;                     // samples 1x28x28, batches up to 1000
//   options.normalization = {true, {0.2860f}, {0.3530f}};
//   Predictor p(make_resnet, DeviceRegistry::global().default_device(), "w.safetensors", options);
//   std::vector<Prediction> top = p.predict(images, count, 3);  // uint8 [count, 1, 28, 28]
//
// A network built in bf16 or fp16 (Network::set_precision) takes the same float32 or uint8
// inputs and gives float32 outputs: the Predictor converts on the device, around the forward.
//
// Where the device can capture (CUDA graphs), each batch size's forward is recorded once, on
// its second use, and replayed after that: a call copies its inputs into the persistent input
// buffer, replays, and reads the outputs back. One call at a time: a Predictor's buffers are
// its own, so threads that predict at once each need one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/dataset.h"
#include "trident/core/device.h"
#include "trident/models/network.h"

namespace trident {

using ModelFactory = std::function<Network()>;  // as the Trainer takes (models/trainer.h)

struct PredictorOptions {
  // The shape of one sample (no batch dimension); used when the Predictor builds the network.
  // Empty: the weights file's "sample_shape" metadata (training checkpoints and save_weights'
  // files carry it), else [1, 28, 28] (a file from PyTorch has none).
  Shape sample_shape;
  // How a uint8 image becomes a model input: (x / 255 - mean[c]) / std[c] (core/dataset.h;
  // one value for every channel, or one per channel). float32 inputs are taken as they are.
  Normalization normalization{true, {0.0f}, {1.0f}};
  // Requests above it are split into batches of max_batch; a smaller (or last) batch runs at the
  // next power of two, at most max_batch, its extra rows zero and discarded, so that at most
  // log2(max_batch) + 2 batch sizes are ever allocated and captured.
  int64_t max_batch = 1000;
  bool capture = true;  // replay captured forwards where the device can
};

// One sample's k most probable classes, most probable first (ties: the lower class first).
struct Prediction {
  std::vector<int64_t> classes;
  std::vector<float> probabilities;
  int64_t top() const { return classes.empty() ? -1 : classes.front(); }
};

class Predictor {
 public:
  // A fresh network from `factory`, built on `device` for inference with options.sample_shape
  // (or the file's), its weights loaded from a safetensors state dict or training checkpoint (load_weights,
  // strict: every parameter and buffer must be in the file, with the model's shapes).
  Predictor(const ModelFactory& factory, Device& device, const std::string& weights_path,
            PredictorOptions options = {});
  // A network that already holds its weights, built (for inference or training) on its device.
  explicit Predictor(Network network, PredictorOptions options = {});
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  const Network& network() const { return network_; }
  Device& device() const { return network_.device(); }
  const Shape& sample_shape() const { return network_.sample_shape(); }
  int64_t sample_numel() const;
  int64_t classes() const { return classes_; }

  // The network's outputs, [count, classes] row-major: logits, or log-probabilities for a model
  // ending in LogSoftmax. samples: count * sample_numel() values, float32 model inputs (finite:
  // UsageError naming the sample otherwise) or uint8 images normalised as the options say.
  std::vector<float> outputs(const float* samples, int64_t count);
  std::vector<float> outputs(const uint8_t* images, int64_t count);
  // Class probabilities [count, classes]: the softmax of the outputs (for log-probabilities,
  // their exp renormalised), computed in double on the host.
  std::vector<float> probabilities(const float* samples, int64_t count);
  std::vector<float> probabilities(const uint8_t* images, int64_t count);
  // The top k (at most classes()) of each sample's probabilities.
  std::vector<Prediction> predict(const float* samples, int64_t count, int64_t k = 1);
  std::vector<Prediction> predict(const uint8_t* images, int64_t count, int64_t k = 1);

  static std::vector<float> softmax_rows(const std::vector<float>& outputs, int64_t classes);
  static std::vector<Prediction> top_k(const std::vector<float>& probabilities, int64_t classes,
                                       int64_t k);

  // Batch sizes run so far, and how many of them are replayed from a capture (tests, bench).
  size_t batch_sizes() const { return batches_.size(); }
  size_t captured_batch_sizes() const;

 private:
  enum Kind { kFloat = 0, kBytes = 1 };
  struct Batch {                      // what one batch size holds on the device
    Tensor images;                    // u8 [rows, C, H, W]: the staging buffer of byte inputs
    Tensor floats;                    // f32 [rows, sample]: float inputs of a 16-bit network
    Tensor table;                     // i32 [rows]: 0, 1, 2 ... (gather in order)
    Tensor output;                    // the outputs in float32: the network's output buffer
                                      // for this size, or its float32 copy (16-bit networks)
    std::unique_ptr<CapturedWork> captured[2];
    int runs[2] = {0, 0};
    bool capture_tried[2] = {false, false};
  };
  void init(const PredictorOptions& options);
  std::vector<float> run(Kind kind, const void* samples, int64_t count);
  // Runs rows <= bucket samples (host bytes) through the bucket's buffers into out.
  void run_batch(Kind kind, const uint8_t* samples, int64_t rows, int64_t bucket, float* out);
  int64_t bucket_for(int64_t rows) const;

  Network network_;
  PredictorOptions options_;
  int64_t classes_ = 0;
  Shape image_shape_;                 // the sample as [C, H, W] (gather_samples' view)
  Tensor step_state_, mean_, inv_std_;
  std::map<int64_t, Batch> batches_;
};

}  // namespace trident
