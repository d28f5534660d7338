// CUDA max pooling (NCHW, no padding): one thread per output in the forward pass; the backward
// pass gathers per input pixel over the windows that cover it (no atomics, deterministic, and
// the same order of additions as the CPU's scatter).
#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// Index arithmetic in I: int when every index (plus a grid stride) fits, else int64_t; 32-bit
// division is several times cheaper.
template <typename I>
struct PoolDims {
  I planes, h, w, oh, ow, k, s;
  bool relu;
};

template <typename I>
PoolDims<I> dims_of(const Pool2dShape& s) {
  return {I(s.batch * s.channels), I(s.height), I(s.width), I(s.out_height()), I(s.out_width()),
          I(s.kernel), I(s.stride), s.relu};
}

bool fits_int(const Pool2dShape& s) {
  const int64_t planes = s.batch * s.channels;
  return planes * s.height * s.width < (int64_t(1) << 30) &&
         planes * s.out_height() * s.out_width() < (int64_t(1) << 30);
}

// y and argmax are [planes, OH, OW]; argmax holds h * W + w within the plane.
template <typename I>
__global__ void maxpool2d_forward_kernel(PoolDims<I> d, const float* x, float* y,
                                         int32_t* argmax) {
  const I total = d.planes * d.oh * d.ow;
  for (I i = I(first_index()); i < total; i += I(grid_step())) {
    const I ow = i % d.ow, t = i / d.ow, oh = t % d.oh, plane = t / d.oh;
    const float* xp = x + int64_t(plane) * d.h * d.w;
    I best = oh * d.s * d.w + ow * d.s;
    float best_value = xp[best];
    for (I kh = 0; kh < d.k; ++kh) {
      const I row = (oh * d.s + kh) * d.w + ow * d.s;
      for (I kw = 0; kw < d.k; ++kw) {
        const float v = xp[row + kw];
        if (v > best_value || isnan(v)) best_value = v, best = row + kw;  // the CPU's rule
      }
    }
    const bool zeroed = d.relu && !(best_value > 0.f);  // the fused ReLU
    y[i] = zeroed ? 0.f : best_value;
    argmax[i] = zeroed ? -1 : static_cast<int32_t>(best);
  }
}

// dx[plane, h, w] = sum of dy over the windows (in increasing output order) whose argmax is here.
template <typename I>
__global__ void maxpool2d_backward_kernel(PoolDims<I> d, const float* dy, const int32_t* argmax,
                                          float* dx) {
  const I total = d.planes * d.h * d.w;
  for (I i = I(first_index()); i < total; i += I(grid_step())) {
    const I w = i % d.w, t = i / d.w, h = t % d.h, plane = t / d.h;
    // Windows oh with oh*S <= h < oh*S + K, and likewise for ow.
    const I oh_first = h >= d.k ? (h - d.k + d.s) / d.s : 0;
    const I oh_last = min(h / d.s, d.oh - 1);
    const I ow_first = w >= d.k ? (w - d.k + d.s) / d.s : 0;
    const I ow_last = min(w / d.s, d.ow - 1);
    const int32_t here = static_cast<int32_t>(h * d.w + w);
    const int64_t base = int64_t(plane) * d.oh * d.ow;
    float sum = 0.f;
    for (I oh = oh_first; oh <= oh_last; ++oh)
      for (I ow = ow_first; ow <= ow_last; ++ow)
        if (argmax[base + oh * d.ow + ow] == here) sum += dy[base + oh * d.ow + ow];
    dx[i] = sum;
  }
}

}  // namespace

void launch_maxpool2d_forward(cudaStream_t stream, const Pool2dShape& s, const float* x, float* y,
                              int32_t* argmax) {
  const int64_t total = s.batch * s.channels * s.out_height() * s.out_width();
  if (s.batch <= 0 || s.channels <= 0 || s.out_height() <= 0 || s.out_width() <= 0) return;
  if (fits_int(s))
    maxpool2d_forward_kernel<<<grid_for(total), kBlockThreads, 0, stream>>>(dims_of<int>(s), x,
                                                                            y, argmax);
  else
    maxpool2d_forward_kernel<<<grid_for(total), kBlockThreads, 0, stream>>>(dims_of<int64_t>(s),
                                                                            x, y, argmax);
}

void launch_maxpool2d_backward(cudaStream_t stream, const Pool2dShape& s, const float* dy,
                               const int32_t* argmax, float* dx) {
  const int64_t total = s.batch * s.channels * s.height * s.width;
  if (total <= 0) return;
  if (fits_int(s))
    maxpool2d_backward_kernel<<<grid_for(total), kBlockThreads, 0, stream>>>(dims_of<int>(s), dy,
                                                                             argmax, dx);
  else
    maxpool2d_backward_kernel<<<grid_for(total), kBlockThreads, 0, stream>>>(
        dims_of<int64_t>(s), dy, argmax, dx);
}

}  // namespace trident::cuda
