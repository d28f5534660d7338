// CUDA training plumbing: the batch gather driven by the on-device step state, the step counter,
// and the fused SGD / Adam updates (one launch over the flat parameter buffer, PyTorch's order
// of operations as in kernels/cpu/optimizers.cpp).
#include <cstdint>

#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// dst[i, :] = src[table[step_state[0] * rows + i], :] in words of type Word; a negative index
// (a corrupt table: the GPU cannot throw) gives a zero row.
template <typename Word>
__global__ void gather_rows_kernel(const Word* src, int64_t words_per_row, const int32_t* table,
                                   int64_t rows, const uint32_t* step_state, Word* dst) {
  const int32_t* indices = table + static_cast<int64_t>(step_state[0]) * rows;
  const int64_t total = rows * words_per_row;
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t r = i / words_per_row, w = i - r * words_per_row;
    const int32_t from = indices[r];
    dst[i] = from >= 0 ? src[static_cast<int64_t>(from) * words_per_row + w] : Word{};
  }
}

__global__ void advance_step_kernel(uint32_t* step_state) {
  step_state[0] += 1;
  step_state[1] += 1;
}

__global__ void sgd_kernel(float* params, const float* grads, float* momentum, int64_t n,
                           float lr, float mu, float wd, float gs, bool nesterov) {
  for (int64_t i = first_index(); i < n; i += grid_step()) {
    float d = grads[i] * gs + wd * params[i];
    if (mu != 0.f) {
      const float buf = mu * momentum[i] + d;
      momentum[i] = buf;
      d = nesterov ? d + mu * buf : buf;
    }
    params[i] += -lr * d;
  }
}

// t = step_state[1] + 1; the bias corrections in double (as Python computes them), once a block.
__global__ void adam_kernel(float* params, const float* grads, float* m, float* v, int64_t n,
                            float lr, float b1, float b2, float one_minus_b1, float one_minus_b2,
                            float eps, float wd, float gs, const uint32_t* step_state) {
  __shared__ float step_size, bias_correction2_sqrt;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(step_state[1]) + 1.0;
    const double bias_correction1 = 1.0 - pow(static_cast<double>(b1), t);
    const double bias_correction2 = 1.0 - pow(static_cast<double>(b2), t);
    step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
    bias_correction2_sqrt = static_cast<float>(sqrt(bias_correction2));
  }
  __syncthreads();
  for (int64_t i = first_index(); i < n; i += grid_step()) {
    const float g = grads[i] * gs + wd * params[i];
    const float mi = m[i] * b1 + one_minus_b1 * g;
    const float vi = v[i] * b2 + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
    params[i] += -step_size * (mi / denom);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename Word>
void gather_as(cudaStream_t stream, const void* src, size_t row_bytes, const int32_t* table,
               int64_t rows, const uint32_t* step_state, void* dst) {
  const int64_t words = static_cast<int64_t>(row_bytes / sizeof(Word));
  gather_rows_kernel<Word><<<grid_for(rows * words), kBlockThreads, 0, stream>>>(
      static_cast<const Word*>(src), words, table, rows, step_state, static_cast<Word*>(dst));
}

}  // namespace

void launch_gather_rows(cudaStream_t stream, const void* src, size_t row_bytes,
                        const int32_t* table, int64_t rows, const uint32_t* step_state,
                        void* dst) {
  if (rows <= 0 || row_bytes == 0) return;
  // The widest word that row size and both base addresses allow (images: 16-byte words).
  if (row_bytes % 16 == 0 && aligned(src, 16) && aligned(dst, 16))
    gather_as<uint4>(stream, src, row_bytes, table, rows, step_state, dst);
  else if (row_bytes % 4 == 0 && aligned(src, 4) && aligned(dst, 4))
    gather_as<uint32_t>(stream, src, row_bytes, table, rows, step_state, dst);
  else
    gather_as<uint8_t>(stream, src, row_bytes, table, rows, step_state, dst);
}

void launch_advance_step(cudaStream_t stream, uint32_t* step_state) {
  advance_step_kernel<<<1, 1, 0, stream>>>(step_state);
}

void launch_sgd_update(cudaStream_t stream, float* params, const float* grads, float* momentum,
                       int64_t n, const SgdParams& hp) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(params, grads, momentum, n, hp.lr,
                                                        hp.momentum, hp.weight_decay,
                                                        hp.grad_scale, hp.nesterov);
}

void launch_adam_update(cudaStream_t stream, float* params, const float* grads, float* m,
                        float* v, int64_t n, const AdamParams& hp, const uint32_t* step_state) {
  if (n <= 0) return;
  const float one_minus_b1 = static_cast<float>(1.0 - static_cast<double>(hp.beta1));
  const float one_minus_b2 = static_cast<float>(1.0 - static_cast<double>(hp.beta2));
  adam_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(
      params, grads, m, v, n, hp.lr, hp.beta1, hp.beta2, one_minus_b1, one_minus_b2, hp.eps,
      hp.weight_decay, hp.grad_scale, step_state);
}

}  // namespace trident::cuda
