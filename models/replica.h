// What one device holds of a training run, and the data set as it lives on one memory space
// (private to models/trainer*.cpp and models/checkpoint.cpp).
#pragma once
#include <chrono>

#include "trident/models/trainer.h"

namespace trident {

// A steady clock in seconds, for the trainer's timings (epochs, and the speed probes that split
// a batch among devices).
inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// The data set on one memory space (a GPU, or the host for every CPU device): samples in their
// stored dtype (uint8 images stay one byte a pixel), labels, and the normalisation arrays.
struct Trainer::ResidentData {
  const void* memory_space = nullptr;
  Tensor train_samples, train_labels, test_samples, test_labels;  // samples [N, C, H, W]
  Tensor mean, inv_std;     // f32 [C]
  Tensor test_order;        // i32 [test count]: 0, 1, 2, ... (evaluation gathers in order)
  float scale = 1.0f;       // 1/255 for byte images
};

struct Trainer::Replica {
  Device* device = nullptr;
  size_t rank = 0;
  int64_t batch = 0;    // samples of each global batch this replica takes
  int64_t offset = 0;   // where they start in the global batch
  float share = 0.0f;   // batch / global batch
  int64_t steps_run = 0;
  Network net;
  std::unique_ptr<Optimizer> optimizer;
  std::shared_ptr<ResidentData> data;
  Tensor index_table;   // int32 [steps * batch]: this epoch's sample order for this replica
  Tensor step_state;    // i32 [2]: [position in epoch, global step]
  Tensor eval_state;    // i32 [2] = {0, 0}: evaluation batches gather from a table view
  Tensor loss_sum;      // running sum of batch losses this epoch
  Tensor labels;        // int32 [batch]
  std::unique_ptr<CapturedWork> captured;
  bool capture_tried = false;
  // net's 16-bit compute copy equals its float32 masters: the optimizer writes both, so a step's
  // forward need not convert. Cleared by whatever else may write the masters (a load, model
  // averaging, Trainer::network()); run_step then converts before the step (a replayed step
  // cannot: its forward was recorded without the conversion).
  bool compute_current = false;
  bool beside = true;  // StepContext::beside (the Trainer's overlap setting)
  StepContext context(bool training, int64_t sample_offset, uint64_t seed) const {
    StepContext ctx;
    ctx.beside = beside;
    ctx.device = device;
    ctx.step_state = step_state;
    ctx.training = training;
    ctx.seed = seed;
    ctx.sample_offset = sample_offset;
    return ctx;
  }
};

}  // namespace trident
