// The batch-norm slots (kernels/opencl/batchnorm.cl): with one piece per channel (many channels)
// a work-group per channel does a whole pass in one launch; with several (few channels, long
// runs) partial statistics, a finish per channel and an elementwise pass. x, y, dx and dy share
// one type (the front checks it): the kernels run in that storage type.
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                        const Tensor& gamma, const Tensor& beta,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        const Tensor& y, const Tensor& save_mean,
                                        const Tensor& save_invstd) {
  normalise(s, training, x, Tensor(), gamma, beta, running_mean, running_var, y, save_mean,
            save_invstd);
}

// The residual block's sum in the normalising pass (as CUDA does; the default would add a pass).
void OpenClDevice::do_batchnorm_add_forward(const BatchNormShape& s, bool training,
                                            const Tensor& x, const Tensor& residual,
                                            const Tensor& gamma, const Tensor& beta,
                                            const Tensor& running_mean,
                                            const Tensor& running_var, const Tensor& y,
                                            const Tensor& save_mean, const Tensor& save_invstd) {
  normalise(s, training, x, residual, gamma, beta, running_mean, running_var, y, save_mean,
            save_invstd);
}

void OpenClDevice::normalise(const BatchNormShape& s, bool training, const Tensor& x,
                             const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var,
                             const Tensor& y, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  const OptionalBufferArg sum = queue_.optional(residual, "residual");
  const cl_uint outer = cl_uint(s.outer), channels = cl_uint(s.channels);
  const cl_uint inner = cl_uint(s.inner), n = cl_uint(s.numel());
  const auto normalize = [&](const Tensor& mean, const Tensor& spread, bool spread_is_var) {
    queue_.launch_typed(Kernel::batchnorm_normalize, x.dtype(), LaunchRange::items(n),
                  queue_.buffer(x, "x"),
                  queue_.optional(gamma, "gamma"), queue_.optional(beta, "beta"),
                  queue_.buffer(mean, "mean"), queue_.buffer(spread, "variance"),
                  cl_int(spread_is_var), s.eps, queue_.buffer(y, "y"), n, channels, inner,
                  cl_int(s.relu), sum);
  };
  if (!training) return normalize(running_mean, running_var, true);
  const ChannelSplit split = channel_split(s.outer, s.channels, s.inner, 3, 0);
  if (split.pieces == 1) {
    queue_.launch_typed(Kernel::batchnorm_forward_channel, x.dtype(),
                  LaunchRange::groups(channels, 256),
                  queue_.buffer(x, "x"), queue_.optional(gamma, "gamma"),
                  queue_.optional(beta, "beta"), queue_.buffer(running_mean, "running_mean"),
                  queue_.buffer(running_var, "running_var"), queue_.buffer(y, "y"),
                  queue_.buffer(save_mean, "save_mean"), queue_.buffer(save_invstd, "save_invstd"),
                  outer, channels, inner, s.eps, s.momentum, cl_int(s.relu), sum);
    return;
  }
  const BufferArg partial{reduce_scratch().mem, 0};
  queue_.launch_typed(Kernel::batchnorm_moments, x.dtype(),
                LaunchRange::groups(size_t(split.pieces) * channels, 256), queue_.buffer(x, "x"),
                outer, channels, inner, split.per_piece, partial);
  queue_.launch(Kernel::batchnorm_moments_finish, LaunchRange::items(channels, 64), partial,
                split.pieces, channels, s.eps, s.momentum,
                queue_.buffer(running_mean, "running_mean"),
                queue_.buffer(running_var, "running_var"), queue_.buffer(save_mean, "save_mean"),
                queue_.buffer(save_invstd, "save_invstd"));
  normalize(save_mean, save_invstd, false);
}

void OpenClDevice::do_batchnorm_backward(const BatchNormShape& s, const Tensor& x,
                                         const Tensor& dy, const Tensor& gamma,
                                         const Tensor& save_mean, const Tensor& save_invstd,
                                         const Tensor& dx, const Tensor& dgamma,
                                         const Tensor& dbeta, const Tensor& beta) {
  // beta is read only for the fused ReLU's mask (s.relu), which is recomputed from x.
  const cl_uint outer = cl_uint(s.outer), channels = cl_uint(s.channels);
  const cl_uint inner = cl_uint(s.inner), n = cl_uint(s.numel());
  if (n == 0) {  // no values: dgamma and dbeta are empty sums
    if (dgamma.defined()) do_fill(dgamma, 0.0f);
    if (dbeta.defined()) do_fill(dbeta, 0.0f);
    return;
  }
  // The per-channel dx coefficients (2 floats each) follow the partial sums in the scratch.
  const ChannelSplit split = channel_split(s.outer, s.channels, s.inner, 2, 2 * size_t(channels));
  if (split.pieces == 1) {
    queue_.launch_typed(Kernel::batchnorm_backward_channel, x.dtype(),
                  LaunchRange::groups(channels, 256),
                  queue_.buffer(x, "x"), queue_.buffer(dy, "dy"), queue_.optional(gamma, "gamma"),
                  queue_.buffer(save_mean, "save_mean"), queue_.buffer(save_invstd, "save_invstd"),
                  queue_.buffer(dx, "dx"), queue_.optional(dgamma, "dgamma"),
                  queue_.optional(dbeta, "dbeta"), outer, channels, inner,
                  queue_.optional(beta, "beta"), cl_int(s.relu));
    return;
  }
  const BufferArg partial{reduce_scratch().mem, 0};
  const BufferArg coef{reduce_scratch().mem, cl_ulong(split.pieces) * channels * 2};
  queue_.launch_typed(Kernel::batchnorm_gradient_sums, x.dtype(),
                LaunchRange::groups(size_t(split.pieces) * channels, 256), queue_.buffer(x, "x"),
                queue_.buffer(dy, "dy"), queue_.buffer(save_mean, "save_mean"), outer, channels,
                inner, split.per_piece, partial, queue_.buffer(save_invstd, "save_invstd"),
                queue_.optional(gamma, "gamma"), queue_.optional(beta, "beta"), cl_int(s.relu));
  queue_.launch(Kernel::batchnorm_gradient_finish, LaunchRange::items(channels, 64), partial,
                split.pieces, channels, cl_uint(s.outer * s.inner),
                queue_.buffer(save_invstd, "save_invstd"), queue_.optional(dgamma, "dgamma"),
                queue_.optional(dbeta, "dbeta"), coef);
  queue_.launch_typed(Kernel::batchnorm_input_gradient, x.dtype(), LaunchRange::items(n),
                queue_.buffer(x, "x"),
                queue_.buffer(dy, "dy"), queue_.optional(gamma, "gamma"),
                queue_.buffer(save_mean, "save_mean"), queue_.buffer(save_invstd, "save_invstd"),
                coef, queue_.buffer(dx, "dx"), n, channels, inner, queue_.optional(beta, "beta"),
                cl_int(s.relu));
}

}  // namespace trident::opencl
