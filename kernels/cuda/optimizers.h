// CUDA optimizer updates over one flat parameter buffer, one launch each: PyTorch's SGD
// (momentum, Nesterov, weight decay), Adam and AdamW, with UpdateControl read on the device
// (the schedule's row for step_state[1], the gradient-clipping coefficient from grad_sumsq), so
// that a captured step replays with each step's own values.
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// UpdateControl with device pointers: schedule [schedule_rows, 2] (null: none), grad_sumsq [1]
// (null: neither clipping nor an overflow check; max_norm 0: no clipping), loss_scale [1] (null:
// none; else the gradients are divided by it and a non-finite grad_sumsq skips the update);
// step_state may be null when neither a schedule nor grad_sumsq is given (SGD).
struct UpdateControlArgs {
  const float* schedule = nullptr;
  int64_t schedule_rows = 0;
  const float* grad_sumsq = nullptr;
  float max_norm = 0.0f;
  const float* loss_scale = nullptr;
};

// See SgdParams; momentum may be null when no step uses momentum. copy (null: none) of
// copy_type f16 or bf16 receives the updated params rounded to it (Device::sgd_update).
void launch_sgd_update(const KernelContext& ctx, float* params, const float* grads,
                       float* momentum, int64_t n, const SgdParams& hp,
                       const UpdateControlArgs& control, const uint32_t* step_state,
                       void* copy, DType copy_type);
// See AdamParams; t = step_state[1] + 1. copy as for launch_sgd_update.
void launch_adam_update(const KernelContext& ctx, float* params, const float* grads, float* m,
                        float* v, int64_t n, const AdamParams& hp,
                        const UpdateControlArgs& control, const uint32_t* step_state,
                        void* copy, DType copy_type);
// GradScaler's update of state = {scale, clean steps} after a step (LossScaleParams), one thread.
void launch_update_loss_scale(const KernelContext& ctx, float* state, const float* grad_sumsq,
                              const LossScaleParams& params);

}  // namespace trident::cuda
