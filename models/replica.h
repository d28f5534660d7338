// Trainer::Replica: what one device holds of a training run (private to models/trainer*.cpp).
#pragma once
#include "trident/models/trainer.h"

namespace trident {

struct Trainer::Replica {
  Device* device = nullptr;
  size_t rank = 0;
  Network net{""};
  std::unique_ptr<Loss> loss;
  std::unique_ptr<Optimizer> optimizer;
  Tensor train_images, train_labels, test_images, test_labels;  // resident data set
  Tensor index_table;   // int32 [steps * batch]: this epoch's sample order for this replica
  Tensor step_state;    // kStepStateBytes: [position in epoch, global step]
  Tensor loss_sum;      // running sum of batch losses this epoch
  Tensor labels;        // int32 [batch]
  std::unique_ptr<CapturedWork> captured;
  bool capture_tried = false;
  StepContext context(bool training, int64_t sample_offset, uint64_t seed) const {
    StepContext ctx;
    ctx.device = device;
    ctx.step_state = step_state.memory();
    ctx.training = training;
    ctx.seed = seed;
    ctx.sample_offset = sample_offset;
    return ctx;
  }
};

}  // namespace trident
