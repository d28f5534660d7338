// The OpenCL C sources (kernels/opencl/*.cl, embedded or read from disk), the main program they
// form, and the list of its kernels.
#pragma once
#include <string>

#include "trident/core/dtype.h"

namespace trident::opencl {

// The text of kernels/opencl/<name>.cl (embedded, or read from disk in a developer build).
std::string kernel_file_text(const char* name);

// The main program for activations stored as `storage` (f32, f16 or bf16: storage.cl's act_t):
// the codes the kernels share (UNARY_<name> from TRIDENT_UNARY_OPS, DEVICE_ERROR_* from
// DeviceErrorCode, DTYPE_* from DType) as #defines, then every op family's file. The own GEMM's
// tile programs are built separately (gemm_tiled.cpp).
std::string main_program_source(DType storage);

// Every kernel of the main program, one X(name) per __kernel, grouped by .cl file.
#define TRIDENT_OPENCL_KERNELS(X)                                                               \
  /* elementwise.cl */ X(unary_forward) X(unary_backward) X(axpby) X(dropout)                  \
  /* channel.cl */ X(channel_affine) X(channel_sums_columns) X(channel_sums_runs)              \
  X(channel_sums_finish)                                                                       \
  /* im2col.cl */ X(im2col) X(col2im)                                                          \
  /* conv2d.cl */ X(conv_output_nchw) X(conv_grad_channel_major) X(conv_grad_sum)              \
  X(conv_flip_weights)                                                                         \
  /* winograd.cl */ X(winograd_kernel) X(winograd_conv) X(winograd_weight_partials)          \
  X(winograd_weight_gradient)                                                                  \
  /* pool2d.cl */ X(maxpool2d_forward) X(maxpool2d_backward) X(maxpool2d_tiled_backward) X(avgpool2d_forward)              \
  X(avgpool2d_global) X(avgpool2d_backward)                                                    \
  /* batchnorm.cl */ X(batchnorm_forward_channel) X(batchnorm_moments)                         \
  X(batchnorm_moments_finish) X(batchnorm_normalize) X(batchnorm_backward_channel)             \
  X(batchnorm_gradient_sums) X(batchnorm_gradient_finish) X(batchnorm_input_gradient)          \
  /* softmax_nll.cl */ X(log_softmax_forward) X(log_softmax_backward) X(nll_loss_forward)      \
  X(nll_loss_backward) X(log_softmax_nll) X(mse_loss) X(count_correct)                         \
  /* gather.cl */ X(gather_rows_u32) X(gather_rows_u8) X(gather_samples) X(advance_step)       \
  /* optimizers.cl */ X(sgd_update) X(adam_update) X(update_loss_scale)                       \
  /* convert.cl */ X(convert)                                                                  \
  /* gemm.cl (main-program part) */ X(gemm_epilogue) X(split_k_sum)

enum class Kernel : int {
#define TRIDENT_OPENCL_KERNEL_ENUM(name) name,
  TRIDENT_OPENCL_KERNELS(TRIDENT_OPENCL_KERNEL_ENUM)
#undef TRIDENT_OPENCL_KERNEL_ENUM
  count_
};

// The kernel's name in the program ("unary_forward").
const char* kernel_name(Kernel kernel);

}  // namespace trident::opencl
