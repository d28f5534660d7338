// What every CUDA launcher (kernels/cuda/*.h) needs from its device: the stream, the number of
// SMs to size grids by, the device's reduction scratch, and its error flag. Host-only header.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace trident::cuda {

// Device memory a CudaDevice allocates once, so that reductions spanning several blocks need no
// allocation inside an op (and stay capturable): per-block partial results, per-channel
// coefficients handed from a reduction to the pass that applies them, and the arrival counter
// with which the last block of a grid finds out it is last (zero between kernels).
struct ReduceScratch {
  double* partials = nullptr;
  int64_t partial_words = 0;
  float* coefficients = nullptr;
  int64_t coefficient_words = 0;
  unsigned int* counter = nullptr;
};

struct KernelContext {
  cudaStream_t stream = nullptr;
  int sms = 1;                    // streaming multiprocessors of the device
  ReduceScratch scratch;
  int32_t* error_flag = nullptr;  // Device::error_flag(): i32 [2] = {DeviceErrorCode, value}
};

}  // namespace trident::cuda
