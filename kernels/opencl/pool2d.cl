// Pooling kernels (NCHW, rectangular windows, strides and padding, floor): max pooling with the
// argmax its backward gathers through (and a fused ReLU), average pooling (padding counted in
// the divisor) with a fast path for global average pooling. Backward passes are gathers over
// the windows that contain an input position: no atomics, the same sums on every run. x, y, dx
// and dy are act_t (storage.cl), compared and summed in float.

// The first output index o whose window [o*stride - pad, o*stride - pad + size) contains
// position `at` (a = at + pad), and the last one (clipped to the outputs).
uint first_window(uint a, uint size, uint stride) {
  return a + 1 >= size ? (a + 1 - size + stride - 1) / stride : 0;
}
uint last_window(uint a, uint stride, uint outputs) { return min(a / stride, outputs - 1); }

// A window's value v at index `at` replaces the best so far when greater, or NaN (in row-major
// window order the first maximum wins, and NaN does), as a select rather than a branch.
void take_max(float v, uint at, float* best, uint* best_at) {
  const bool take = v > *best || isnan(v);
  *best = take ? v : *best;
  *best_at = take ? at : *best_at;
}

// y[n, c, oh, ow] = max of the window; argmax = h*W + w of its first maximum in x's plane
// (row-major window order, NaN wins; padding never does). relu: y = max(y, 0) and argmax = -1
// where y is not > 0 (a fused ReLU passes no gradient there).
__kernel void maxpool2d_forward(__global const act_t* x, ulong x_off, __global act_t* y,
                                ulong y_off, __global int* argmax, ulong argmax_off, uint planes,
                                uint height, uint width, uint kernel_h, uint kernel_w,
                                uint stride_h, uint stride_w, uint pad_h, uint pad_w,
                                uint out_h, uint out_w, int relu) {
  const uint i = get_global_id(0);
  if (i >= planes * out_h * out_w) return;
  const uint ow = i % out_w, oh = (i / out_w) % out_h, plane = i / (out_w * out_h);
  __global const act_t* in = x + x_off + plane * height * width;
  const int h_start = (int)(oh * stride_h) - (int)pad_h;
  const int w_start = (int)(ow * stride_w) - (int)pad_w;
  const uint h0 = max(h_start, 0), w0 = max(w_start, 0);
  const uint h1 = min(h_start + (int)kernel_h, (int)height);
  const uint w1 = min(w_start + (int)kernel_w, (int)width);
  uint best_at = h0 * width + w0;
  float best = LOAD(in, best_at);
  if (kernel_h == 2 && kernel_w == 2 && pad_h == 0 && pad_w == 0) {
    // The seed CNN's window, unrolled: no loop bounds per work-item.
    const uint at = best_at;
    take_max(LOAD(in, at + 1), at + 1, &best, &best_at);
    take_max(LOAD(in, at + width), at + width, &best, &best_at);
    take_max(LOAD(in, at + width + 1), at + width + 1, &best, &best_at);
  } else {
    for (uint h = h0; h < h1; ++h)
      for (uint w = w0; w < w1; ++w)
        take_max(LOAD(in, h * width + w), h * width + w, &best, &best_at);
  }
  const bool zeroed = relu && !(best > 0.0f);
  STORE(y, y_off + i, zeroed ? 0.0f : best);
  argmax[argmax_off + i] = zeroed ? -1 : (int)best_at;
}

// dx[n, c, h, w] = the sum of dy over the windows containing (h, w) whose argmax is (h, w).
__kernel void maxpool2d_backward(__global const act_t* dy, ulong dy_off,
                                 __global const int* argmax, ulong argmax_off, __global act_t* dx,
                                 ulong dx_off, uint planes, uint height, uint width,
                                 uint kernel_h, uint kernel_w, uint stride_h, uint stride_w,
                                 uint pad_h, uint pad_w, uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= planes * height * width) return;
  const uint w = i % width, h = (i / width) % height, plane = i / (width * height);
  const uint oh_lo = first_window(h + pad_h, kernel_h, stride_h);
  const uint oh_hi = last_window(h + pad_h, stride_h, out_h);
  const uint ow_lo = first_window(w + pad_w, kernel_w, stride_w);
  const uint ow_hi = last_window(w + pad_w, stride_w, out_w);
  const uint out_base = plane * out_h * out_w;
  const int here = (int)(h * width + w);
  float sum = 0.0f;
  for (uint oh = oh_lo; oh <= oh_hi; ++oh)
    for (uint ow = ow_lo; ow <= ow_hi; ++ow) {
      const uint o = out_base + oh * out_w + ow;
      if (argmax[argmax_off + o] == here) sum += LOAD(dy, dy_off + o);
    }
  STORE(dx, dx_off + i, sum);
}

// The same where the windows tile the plane (kernel = stride, no padding, a whole number of
// windows a row and a column): a work-item per window writes all of it, the argmax's gradient
// (0 + dy, as the gather's sum has it) and zeros. The gather spends its time finding the windows
// of a position (four divisions by run-time values): bench/bench_models.h's ResNet-9 in fp32 on
// NVIDIA's OpenCL (H200) 35.31 -> 34.51 ms a step, the seed CNN 0.279-0.286 -> 0.273-0.277.
__kernel void maxpool2d_tiled_backward(__global const act_t* dy, ulong dy_off,
                                       __global const int* argmax, ulong argmax_off,
                                       __global act_t* dx, ulong dx_off, uint planes,
                                       uint height, uint width, uint kernel_h, uint kernel_w,
                                       uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= planes * out_h * out_w) return;
  const uint ow = i % out_w, oh = (i / out_w) % out_h, plane = i / (out_w * out_h);
  const int best = argmax[argmax_off + i];
  const float gradient = 0.0f + LOAD(dy, dy_off + i);
  const ulong base = dx_off + (ulong)plane * height * width;
  for (uint h = oh * kernel_h; h < (oh + 1) * kernel_h; ++h)
    for (uint w = ow * kernel_w; w < (ow + 1) * kernel_w; ++w)
      STORE(dx, base + h * width + w, best == (int)(h * width + w) ? gradient : 0.0f);
}

// y = the sum of the window's inputs / (kernel_h * kernel_w).
__kernel void avgpool2d_forward(__global const act_t* x, ulong x_off, __global act_t* y,
                                ulong y_off, uint planes, uint height, uint width, uint kernel_h,
                                uint kernel_w, uint stride_h, uint stride_w, uint pad_h,
                                uint pad_w, uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= planes * out_h * out_w) return;
  const uint ow = i % out_w, oh = (i / out_w) % out_h, plane = i / (out_w * out_h);
  __global const act_t* in = x + x_off + plane * height * width;
  const int h_start = (int)(oh * stride_h) - (int)pad_h;
  const int w_start = (int)(ow * stride_w) - (int)pad_w;
  const uint h0 = max(h_start, 0), w0 = max(w_start, 0);
  const uint h1 = min(h_start + (int)kernel_h, (int)height);
  const uint w1 = min(w_start + (int)kernel_w, (int)width);
  float sum = 0.0f;
  for (uint h = h0; h < h1; ++h)
    for (uint w = w0; w < w1; ++w) sum += LOAD(in, h * width + w);
  STORE(y, y_off + i, sum / (float)(kernel_h * kernel_w));
}

#define GLOBAL_POOL_GROUP 64

// Global average pooling (the window is the whole plane): one work-group of GLOBAL_POOL_GROUP
// per plane reads it with neighbouring work-items on neighbouring values, then a tree sum.
__kernel __attribute__((reqd_work_group_size(GLOBAL_POOL_GROUP, 1, 1)))
void avgpool2d_global(__global const act_t* x, ulong x_off, __global act_t* y, ulong y_off,
                      uint plane_size) {
  __local float sums[GLOBAL_POOL_GROUP];
  const uint lid = get_local_id(0), plane = get_group_id(0);
  __global const act_t* in = x + x_off + plane * plane_size;
  float sum = 0.0f;
  for (uint k = lid; k < plane_size; k += GLOBAL_POOL_GROUP) sum += LOAD(in, k);
  sums[lid] = sum;
  for (uint width = GLOBAL_POOL_GROUP / 2; width > 0; width >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < width) sums[lid] += sums[lid + width];
  }
  if (lid == 0) STORE(y, y_off + plane, sums[0] / (float)plane_size);
}

// dx[n, c, h, w] = the sum over the windows containing (h, w) of dy / (kernel_h * kernel_w);
// for global pooling (one window) simply dy[plane] / (H * W).
__kernel void avgpool2d_backward(__global const act_t* dy, ulong dy_off, __global act_t* dx,
                                 ulong dx_off, uint planes, uint height, uint width,
                                 uint kernel_h, uint kernel_w, uint stride_h, uint stride_w,
                                 uint pad_h, uint pad_w, uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= planes * height * width) return;
  const uint w = i % width, h = (i / width) % height, plane = i / (width * height);
  const uint oh_lo = first_window(h + pad_h, kernel_h, stride_h);
  const uint oh_hi = last_window(h + pad_h, stride_h, out_h);
  const uint ow_lo = first_window(w + pad_w, kernel_w, stride_w);
  const uint ow_hi = last_window(w + pad_w, stride_w, out_w);
  const uint out_base = plane * out_h * out_w;
  float sum = 0.0f;
  for (uint oh = oh_lo; oh <= oh_hi; ++oh)
    for (uint ow = ow_lo; ow <= ow_hi; ++ow) sum += LOAD(dy, dy_off + out_base + oh * out_w + ow);
  STORE(dx, dx_off + i, sum / (float)(kernel_h * kernel_w));
}
