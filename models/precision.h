// The precision policy of a run (--precision, TrainOptions::precision, TRIDENT_PRECISION):
//   fp32  float32 everywhere (the default).
//   tf32  float32 storage; GEMMs and convolutions may use TF32 tensor cores (CUDA; elsewhere
//         the same as fp32).
//   bf16  activations and GEMM / convolution operands in bfloat16 with float32 accumulation;
//         master weights, gradients, optimizer state, batch-norm statistics, softmax and losses
//         in float32 (what PyTorch's autocast keeps in float32). No loss scaling needed.
//   fp16  as bf16 in IEEE half, with dynamic loss scaling (an overflowed step is skipped and the
//         scale halved; it doubles after 2000 clean steps, as torch.cuda.amp.GradScaler).
#pragma once
#include <optional>
#include <string>

#include "trident/core/dtype.h"

namespace trident {

enum class Precision : uint8_t { fp32, tf32, bf16, fp16 };

// "fp32", "tf32", "bf16", "fp16" (also "float32", "bfloat16", "float16", "half"); UsageError
// naming the choices otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
// The run's precision: `chosen` where given, else TRIDENT_PRECISION (UsageError naming the
// variable for a value parse_precision refuses), else fp32.
Precision resolve_precision(const std::optional<Precision>& chosen);
// The type activations and GEMM / convolution operands are kept in.
inline DType compute_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}
inline bool uses_loss_scaling(Precision p) { return p == Precision::fp16; }

// What a layer computes in: the activation type and whether float32 GEMMs may use TF32.
struct ComputeSpec {
  DType dtype = DType::f32;
  bool tf32 = false;
};
inline ComputeSpec compute_spec(Precision p) { return {compute_dtype(p), p == Precision::tf32}; }

}  // namespace trident
