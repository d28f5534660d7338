// Convolution as im2col + one GEMM over the whole batch, and max pooling; all NCHW.
// The GEMM works on "channel-major" matrices: col is [C*KH*KW + 1, L] (the last row all ones, so
// that the weight-gradient GEMM yields the bias gradient as one more column) and the product is
// [OC, L], with L = N*OH*OW and column j = n*OH*OW + oh*OW + ow, so one GEMM covers every image.

// col[(c*KH + kh)*KW + kw, j] = x[n, c, oh*stride - pad + kh, ow*stride - pad + kw] (0 off the
// edge), col[C*KH*KW, j] = 1.
// One work-item per (n, c, oh, ow) writes its KH*KW column entries: the index divisions (slow
// on GPUs for run-time divisors) are paid once per patch, not once per element, and for each
// (kh, kw) neighbouring work-items still write neighbouring columns.
__kernel void im2col(__global const float* x, ulong x_off, __global float* col, ulong col_off,
                     uint batch, uint channels, uint height, uint width, uint kernel_h,
                     uint kernel_w, uint stride, uint pad, uint out_h, uint out_w) {
  const uint plane = out_h * out_w, cols = batch * plane;
  const uint i = get_global_id(0);
  if (i >= batch * channels * plane) return;
  const uint p = i % plane, t = i / plane, c = t % channels, n = t / channels;
  const uint oh = p / out_w, ow = p - oh * out_w;
  const int h0 = (int)(oh * stride) - (int)pad, w0 = (int)(ow * stride) - (int)pad;
  __global const float* xc = x + x_off + (ulong)(n * channels + c) * height * width;
  __global float* out = col + col_off + (ulong)c * kernel_h * kernel_w * cols + n * plane + p;
  for (uint kh = 0; kh < kernel_h; ++kh) {
    const int h = h0 + (int)kh;
    const bool row_inside = h >= 0 && h < (int)height;
    for (uint kw = 0; kw < kernel_w; ++kw, out += cols) {
      const int w = w0 + (int)kw;
      *out = row_inside && w >= 0 && w < (int)width ? xc[h * (int)width + w] : 0.0f;
    }
  }
  // The ones row after the last channel's rows.
  if (c == 0) col[col_off + (ulong)channels * kernel_h * kernel_w * cols + n * plane + p] = 1.0f;
}

// dx[n, c, h, w] = sum of dcol over every (kh, kw, oh, ow) that read x[n, c, h, w]: a gather, so
// no atomics and the same sum order on every run. Only kernel offsets with
// (h + pad - kh) % stride == 0 reach a patch: kh steps by the stride while the output row
// oh = (h + pad - kh) / stride steps down by one (no division inside the loops).
__kernel void col2im(__global const float* dcol, ulong dcol_off, __global float* dx, ulong dx_off,
                     uint batch, uint channels, uint height, uint width, uint kernel_h,
                     uint kernel_w, uint stride, uint pad, uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= batch * channels * height * width) return;
  const uint w = i % width, t = i / width, h = t % height, t2 = t / height;
  const uint c = t2 % channels, n = t2 / channels;
  const uint plane = out_h * out_w, cols = batch * plane;
  __global const float* dcol_c =
      dcol + dcol_off + (ulong)c * kernel_h * kernel_w * cols + n * plane;
  const int hp = (int)(h + pad), wp = (int)(w + pad), s = (int)stride;
  const int kw_first = wp % s, ow_first = wp / s;
  float sum = 0.0f;
  for (int kh = hp % s, oh = hp / s; kh < (int)kernel_h && oh >= 0; kh += s, --oh) {
    if (oh >= (int)out_h) continue;
    for (int kw = kw_first, ow = ow_first; kw < (int)kernel_w && ow >= 0; kw += s, --ow) {
      if (ow >= (int)out_w) continue;
      sum += dcol_c[(ulong)(kh * (int)kernel_w + kw) * cols + oh * out_w + ow];
    }
  }
  dx[dx_off + i] = sum;
}

// dw[oc, t] (t < taps - 1) and db[oc] (t = taps - 1: the ones row's column) = sums over the
// rows of partial [rows, OC, taps], the weight-gradient GEMM's split-K slices, in slice order.
__kernel void conv_grad_sum(__global const float* partial, ulong partial_off, uint rows,
                            uint out_channels, uint taps, __global float* dw, ulong dw_off,
                            __global float* db, ulong db_off, int has_db) {
  const uint i = get_global_id(0), count = out_channels * taps;
  if (i >= count) return;
  float v = 0.0f;
  for (uint r = 0; r < rows; ++r) v += partial[partial_off + (ulong)r * count + i];
  const uint oc = i / taps, t = i - oc * taps;
  if (t + 1 < taps) dw[dw_off + oc * (taps - 1) + t] = v;
  else if (has_db) db[db_off + oc] = v;
}

// y[n, oc, p] = product[oc, n*plane + p] + bias[oc] (has_bias == 0: no bias); plane = OH*OW.
__kernel void conv_output_nchw(__global const float* product, ulong product_off, __global float* y,
                               ulong y_off, __global const float* bias, ulong bias_off,
                               int has_bias, uint batch, uint out_channels, uint plane) {
  const uint i = get_global_id(0);
  if (i >= batch * out_channels * plane) return;
  const uint p = i % plane, oc = (i / plane) % out_channels, n = i / (plane * out_channels);
  const float v = product[product_off + (ulong)oc * batch * plane + n * plane + p];
  y[y_off + i] = has_bias ? v + bias[bias_off + oc] : v;
}

// dyt[oc, n*plane + p] = dy[n, oc, p]: the output gradient in the GEMM's channel-major layout.
__kernel void conv_grad_channel_major(__global const float* dy, ulong dy_off, __global float* dyt,
                                      ulong dyt_off, uint batch, uint out_channels, uint plane) {
  const uint cols = batch * plane;
  const uint i = get_global_id(0);
  if (i >= out_channels * cols) return;
  const uint oc = i / cols, j = i - oc * cols, n = j / plane, p = j - n * plane;
  dyt[dyt_off + i] = dy[dy_off + ((ulong)n * out_channels + oc) * plane + p];
}

// y[n, c, oh, ow] = max of the window; argmax = h*W + w of its first maximum in x's plane.
// relu: y = max(y, 0) and argmax = -1 where y is not > 0 (a fused ReLU passes no gradient).
__kernel void maxpool2d_forward(__global const float* x, ulong x_off, __global float* y,
                                ulong y_off, __global int* argmax, ulong argmax_off, uint planes,
                                uint height, uint width, uint kernel_size, uint stride,
                                uint out_h, uint out_w, int relu) {
  const uint i = get_global_id(0);
  if (i >= planes * out_h * out_w) return;
  const uint ow = i % out_w, oh = (i / out_w) % out_h, plane = i / (out_w * out_h);
  __global const float* in = x + x_off + (ulong)plane * height * width;
  const uint h0 = oh * stride, w0 = ow * stride;
  uint best_at = h0 * width + w0;
  float best = in[best_at];
  for (uint kh = 0; kh < kernel_size; ++kh)
    for (uint kw = 0; kw < kernel_size; ++kw) {
      const uint at = (h0 + kh) * width + w0 + kw;
      if (in[at] > best) { best = in[at]; best_at = at; }
    }
  const bool zeroed = relu && !(best > 0.0f);
  y[y_off + i] = zeroed ? 0.0f : best;
  argmax[argmax_off + i] = zeroed ? -1 : (int)best_at;
}

// dx[n, c, h, w] = sum of dy over the windows containing (h, w) whose argmax is (h, w).
__kernel void maxpool2d_backward(__global const float* dy, ulong dy_off,
                                 __global const int* argmax, ulong argmax_off, __global float* dx,
                                 ulong dx_off, uint planes, uint height, uint width,
                                 uint kernel_size, uint stride, uint out_h, uint out_w) {
  const uint i = get_global_id(0);
  if (i >= planes * height * width) return;
  const uint w = i % width, h = (i / width) % height, plane = i / (width * height);
  // windows oh with oh*stride <= h < oh*stride + kernel_size
  const uint oh_lo = h + 1 >= kernel_size ? (h + 1 - kernel_size + stride - 1) / stride : 0;
  const uint ow_lo = w + 1 >= kernel_size ? (w + 1 - kernel_size + stride - 1) / stride : 0;
  const uint oh_hi = min(h / stride, out_h - 1), ow_hi = min(w / stride, out_w - 1);
  const ulong out_base = (ulong)plane * out_h * out_w;
  const int here = (int)(h * width + w);
  float sum = 0.0f;
  for (uint oh = oh_lo; oh <= oh_hi && oh < out_h; ++oh)
    for (uint ow = ow_lo; ow <= ow_hi && ow < out_w; ++ow) {
      const ulong o = out_base + oh * out_w + ow;
      if (argmax[argmax_off + o] == here) sum += dy[dy_off + o];
    }
  dx[dx_off + i] = sum;
}
