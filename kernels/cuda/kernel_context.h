// What every CUDA launcher (kernels/cuda/*.h) needs from its device: the stream, the number of
// SMs to size grids by, the device's reduction scratch, and its error flag. Host-only header.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "trident/core/dtype.h"

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
  unsigned int* counter = nullptr;  // arrival counters, zero between kernels
  int64_t counter_words = 0;
};

// A float tensor's device data with its type (f32, f16 or bf16), for the launchers whose
// operands may mix types (kernels read it as float_types.cuh's AnyFloat). data null: absent.
struct FloatData {
  void* data = nullptr;
  DType dtype = DType::f32;
};

struct KernelContext {
  cudaStream_t stream = nullptr;
  int sms = 1;  // streaming multiprocessors of the device
  ReduceScratch scratch;
  int32_t* error_flag = nullptr;  // Device::error_flag(): i32 [2] = {DeviceErrorCode, value}
  // Whether kernels may be launched cooperatively (all blocks resident, a grid-wide barrier).
  bool cooperative_launch = false;
  // Whether launch() may start a kernel before the one before it has completed (programmatic
  // dependent launch, compute capability 9.0+; see launch.cuh).
  bool dependent_launch = false;
  // Whether the implicit convolution may use the sm_90a warpgroup-multiply kernels
  // (wgmma_conv.h): the device loaded them and TRIDENT_CUDA_WGMMA is not 0.
  bool warpgroup_mma = false;
};

}  // namespace trident::cuda
