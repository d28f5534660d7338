// The argument types of the Device ops: activation enum, GEMM arguments, convolution, pooling and
// normalisation shapes, optimizer hyper-parameters, the per-sample data transform.
#pragma once
#include <cstdint>

#include "trident/core/tensor.h"

namespace trident {

// The elementwise family (forward and derivative), one value per function, so that a new
// activation is one entry in this list plus its formulas (core/unary_math.h for the CPU, CUDA
// and the reference; kernels/opencl/elementwise.cl). `alpha` is the op's parameter where it has
// one (LeakyReLU's negative slope). X(name, PyTorch module name): each backend expands the list
// into its dispatch.
#define TRIDENT_UNARY_OPS(X)                                                                  \
  X(identity, Identity)     /* x */                                                           \
  X(relu, ReLU)             /* max(x, 0) */                                                   \
  X(leaky_relu, LeakyReLU)  /* x > 0 ? x : alpha * x */                                       \
  X(tanh, Tanh)             /* tanh(x) */                                                     \
  X(sigmoid, Sigmoid)       /* 1 / (1 + exp(-x)) */                                           \
  X(gelu, GELU)             /* x * Phi(x), the exact erf form (approximate='none') */      \
  X(silu, SiLU)             /* x * sigmoid(x) (swish) */

enum class UnaryOp : uint8_t {
#define TRIDENT_UNARY_ENUM(name, module) name,
  TRIDENT_UNARY_OPS(TRIDENT_UNARY_ENUM)
#undef TRIDENT_UNARY_ENUM
};
const char* unary_op_name(UnaryOp op);    // "relu", ...
const char* unary_module_name(UnaryOp op);  // "ReLU", as PyTorch's nn module
// Whether unary_backward reads the forward input x (else the forward output y suffices), so
// that a layer knows whether its forward may run in place (LeakyReLU: only for alpha < 0).
bool unary_backward_needs_input(UnaryOp op, float alpha = 0.0f);

enum class BiasKind : uint8_t { none, per_column, per_row };

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C, then + bias (per column: bias[N], per row:
// bias[M]), then the activation. op(A) is [M,K] (stored [K,M] if trans_a); op(B) is [K,N]
// (stored [N,K] if trans_b). lda/ldb/ldc are the stored row strides in elements; 0 means packed
// (the stored row length), the front fills it in before a backend sees the call. beta == 0
// means C is not read (NaN in C does not survive). a, b, c, bias are tensors of this device
// holding at least the strided matrices (their shapes are not interpreted, only their sizes).
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  Tensor a, b, c;
  int64_t lda = 0, ldb = 0, ldc = 0;
  Tensor bias;                        // undefined: no bias
  BiasKind bias_kind = BiasKind::none;
  UnaryOp activation = UnaryOp::identity;
  float activation_alpha = 0.0f;
  // float32 A and B may be multiplied with TF32 tensor cores (10-bit mantissa products, float32
  // accumulation) where the backend has them (--precision tf32); elsewhere ignored.
  bool allow_tf32 = false;
  bool has_epilogue() const { return bias.defined() || activation != UnaryOp::identity; }
};

// NCHW convolution with zero padding; weights [out_c, in_c, kernel_h, kernel_w], bias [out_c].
// dtype: the type of x, w, y, dx and dy (a backend sizes its workspace for it); dw and db are
// always float32 (they land in the float32 gradient buffer).
struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  DType dtype = DType::f32;
  bool allow_tf32 = false;  // as GemmArgs::allow_tf32, for a float32 convolution
  int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  int64_t patch_size() const { return in_channels * kernel_h * kernel_w; }  // im2col rows
  int64_t input_numel() const { return batch * in_channels * height * width; }
  int64_t output_numel() const { return batch * out_channels * out_height() * out_width(); }
  int64_t weight_numel() const { return out_channels * patch_size(); }
};

// For a stride-1 convolution s: the convolution whose output is s's data gradient, dx =
// conv(dy, w flipped in both axes and transposed to [C, OC, KH, KW]): dy [N, OC, OH, OW] is its
// input, with padding KH-1-PH and KW-1-PW (valid where s's padding is below its kernel's size).
inline Conv2dShape input_gradient_shape(const Conv2dShape& s) {
  Conv2dShape g = s;
  g.in_channels = s.out_channels, g.out_channels = s.in_channels;
  g.height = s.out_height(), g.width = s.out_width();
  g.pad_h = s.kernel_h - 1 - s.pad_h, g.pad_w = s.kernel_w - 1 - s.pad_w;
  return g;
}

// NCHW pooling (max or average). Windows start at -pad and step by stride; windows running past
// the padded edge are dropped (floor), as in PyTorch with ceil_mode=False. Max pooling treats
// padding as -inf; average pooling counts padded zeros in the divisor (count_include_pad=True).
// relu (max pooling only): a ReLU after the pooling, fused: y = max(window max, 0), and
// argmax = -1 where that is not > 0 (the ReLU passes no gradient there, so maxpool2d_backward
// sends none back).
struct Pool2dShape {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool relu = false;
  int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  int64_t input_numel() const { return batch * channels * height * width; }
  int64_t output_numel() const { return batch * channels * out_height() * out_width(); }
  // Whether the windows tile the plane exactly (kernel = stride, no padding, a whole number of
  // windows a row and a column): each input lies in one window (backends' per-window kernels).
  bool tiles_plane() const {
    return kernel_h == stride_h && kernel_w == stride_w && pad_h == 0 && pad_w == 0 &&
           height % kernel_h == 0 && width % kernel_w == 0;
  }
};

// Batch normalisation over x viewed as [outer, channels, inner] (BatchNorm2d: [N, C, H*W],
// BatchNorm1d: [N, C, 1]). Training uses the batch's statistics (biased variance) and updates
// the running ones: running = (1 - momentum) * running + momentum * batch (unbiased variance);
// evaluation uses the running statistics.
// relu: a ReLU after the normalisation, fused (training and evaluation): y = max(bn(x), 0), and
// the backward takes the gradient through it first, dy passing only where y > 0 (so it reads y,
// the forward's output), as ReLU's own backward would.
struct BatchNormShape {
  int64_t outer = 0, channels = 0, inner = 1;
  float eps = 1e-5f, momentum = 0.1f;
  bool relu = false;
  int64_t numel() const { return outer * channels * inner; }
};

// PyTorch's SGD: d = g*grad_scale + weight_decay*p; buf = momentum*buf + d (buf starts at 0);
// d = nesterov ? d + momentum*buf : buf (momentum > 0); p -= lr * d.
struct SgdParams {
  float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f, grad_scale = 1.0f;
  bool nesterov = false;
};

// PyTorch's Adam (decoupled_weight_decay = false: L2, g += wd*p) and AdamW (true: p -= lr*wd*p
// before the step): g = grad*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), with t = step_state[1] + 1 read on
// the device.
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f,
        grad_scale = 1.0f;
  bool decoupled_weight_decay = false;
};

// What an optimizer update reads on the device each step, so that a captured step replays with
// the step's own values:
// - schedule (f32 [steps, 2], optional): row t = (lr, momentum) for SGD or (lr, beta1) for Adam
//   at optimizer step t = step_state[1] (the last row past the end); replaces hp.lr and
//   hp.momentum / hp.beta1.
// - grad_sumsq (f32 [1], optional): the squared norm of the gradient buffer as it is (before
//   grad_scale); the update then scales the gradient by min(1, max_norm / (norm + 1e-6)) with
//   norm = grad_scale * sqrt(grad_sumsq), as torch.nn.utils.clip_grad_norm_ does (max_norm 0:
//   no clipping, the sum is only read for the non-finite check below).
// - loss_scale (f32 [1], optional): the gradients hold loss_scale times the true ones (fp16
//   loss scaling): they are divided by it, and when grad_sumsq is not finite (an overflow) the
//   update is skipped: parameters and optimizer state stay as they are (the step counters still
//   advance). update_loss_scale() then adjusts the scale.
struct UpdateControl {
  Tensor schedule;
  Tensor grad_sumsq;
  float max_norm = 0.0f;
  Tensor loss_scale;
};

// Dynamic loss scaling (PyTorch's GradScaler): state f32 [2] = {scale, clean steps}. After each
// step: a non-finite grad_sumsq halves the scale (backoff) and resets the count; otherwise the
// count grows, and after `interval` clean steps the scale doubles (growth).
struct LossScaleParams {
  float growth = 2.0f, backoff = 0.5f;
  int64_t interval = 2000;
};

// Per-step scalars kept on the device, so that a captured step replays with fresh values: a
// buffer of two uint32 (an i32 [2] tensor), [0] = batch position in the epoch's index table,
// [1] = optimizer steps done so far (dropout and augmentation counters, Adam's t, schedules).
// advance_step increments both.
constexpr int64_t kStepStateCount = 2;

// What gather_samples does to each sample on its way into the batch:
// y[c, h, w] = (x[c, h', w'] * scale - mean[c]) * inv_std[c], where (h', w') is (h, w) shifted
// by a random crop of the sample zero-padded by crop_padding on each side (pixels from the
// padding are 0 before scaling, as torchvision pads raw images), mirrored left-right when the
// flip draw says so. The draws are Philox (core/philox.h) keyed by (seed, stream) with counter
// (sample_offset + i, step_state[1]): the same on every backend, so runs are reproducible and
// backend-independent. mean / inv_std undefined: no normalisation.
struct SampleTransform {
  float scale = 1.0f;
  Tensor mean, inv_std;          // f32 [channels]
  int64_t crop_padding = 0;      // 0: no crop
  bool horizontal_flip = false;
  uint64_t seed = 0;
  uint32_t stream = 0;
  int64_t sample_offset = 0;     // this batch's first sample within the global batch
  bool augments() const { return crop_padding > 0 || horizontal_flip; }
};

}  // namespace trident
