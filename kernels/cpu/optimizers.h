// CPU optimizer updates over one flat parameter buffer: PyTorch's SGD and Adam.
#pragma once
#include <cstdint>

#include "trident/core/device.h"

namespace trident::cpu {

// torch.optim.SGD (dampening 0): see SgdParams. momentum may be null when hp.momentum == 0.
void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp);
// torch.optim.Adam (L2 weight decay, amsgrad off): see AdamParams; t = steps_done + 1.
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, uint32_t steps_done);

}  // namespace trident::cpu
