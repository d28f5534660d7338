// Patch matrices for the convolution GEMMs (NCHW, rectangular kernels, strides and padding):
// im2col and its adjoint col2im, for a whole batch at once in the "channel-major" layout the
// convolution uses (col [C*KH*KW (+ 1), L], L = N*OH*OW, column j = n*OH*OW + oh*OW + ow), which
// for batch 1 without the ones row is Device::im2col's one-sample layout [C*KH*KW, OH*OW].
// x and dx are act_t (storage.cl); the columns are act_t or float (col_act, storage.cl's
// COL_STORE): 16-bit where the GEMMs around them multiply 16-bit operands, else float, so that
// float32 GEMMs and col2im add the columns of W^T dy before a single rounding.

// col[(c*KH + kh)*KW + kw, j] = x[n, c, oh*SH - PH + kh, ow*SW - PW + kw] (0 off the edge); with
// ones_row, col[C*KH*KW, j] = 1 (the convolution's weight-gradient GEMM then yields the bias
// gradient as one more column).
// One work-item per (n, c, oh, ow) writes its KH*KW column entries: the index divisions (slow on
// GPUs for run-time divisors) are paid once per patch, not once per element, and for each
// (kh, kw) neighbouring work-items still write neighbouring columns.
__kernel void im2col(__global const act_t* x, ulong x_off, __global uchar* col, ulong col_off,
                     uint batch, uint channels, uint height, uint width, uint kernel_h,
                     uint kernel_w, uint stride_h, uint stride_w, uint pad_h, uint pad_w,
                     uint out_h, uint out_w, int ones_row, int col_act) {
  const uint plane = out_h * out_w, cols = batch * plane;
  const uint i = get_global_id(0);
  if (i >= batch * channels * plane) return;
  const uint p = i % plane, t = i / plane, c = t % channels, n = t / channels;
  const uint oh = p / out_w, ow = p - oh * out_w;
  const int h0 = (int)(oh * stride_h) - (int)pad_h, w0 = (int)(ow * stride_w) - (int)pad_w;
  __global const act_t* xc = x + x_off + (n * channels + c) * height * width;
  ulong out = col_off + (ulong)c * kernel_h * kernel_w * cols + n * plane + p;
  for (uint kh = 0; kh < kernel_h; ++kh) {
    const int h = h0 + (int)kh;
    const bool row_inside = h >= 0 && h < (int)height;
    for (uint kw = 0; kw < kernel_w; ++kw, out += cols) {
      const int w = w0 + (int)kw;
      COL_STORE(col, out,
                row_inside && w >= 0 && w < (int)width ? LOAD(xc, h * (int)width + w) : 0.0f,
                col_act);
    }
  }
  if (ones_row && c == 0)
    COL_STORE(col, col_off + (ulong)channels * kernel_h * kernel_w * cols + n * plane + p, 1.0f,
              col_act);
}

// dx[n, c, h, w] = the sum of col over every (kh, kw, oh, ow) that read x[n, c, h, w]: a gather,
// so no atomics and the same sum order on every run. Only kernel offsets with
// (h + PH - kh) % SH == 0 reach a patch: kh steps by the stride while the output row
// oh = (h + PH - kh) / SH steps down by one (no division inside the loops); likewise along w.
__kernel void col2im(__global const uchar* col, ulong col_off, __global act_t* dx, ulong dx_off,
                     uint batch, uint channels, uint height, uint width, uint kernel_h,
                     uint kernel_w, uint stride_h, uint stride_w, uint pad_h, uint pad_w,
                     uint out_h, uint out_w, int col_act) {
  const uint i = get_global_id(0);
  if (i >= batch * channels * height * width) return;
  const uint w = i % width, t = i / width, h = t % height, t2 = t / height;
  const uint c = t2 % channels, n = t2 / channels;
  const uint plane = out_h * out_w, cols = batch * plane;
  const ulong col_c = col_off + (ulong)c * kernel_h * kernel_w * cols + n * plane;
  const int hp = (int)(h + pad_h), wp = (int)(w + pad_w);
  const int sh = (int)stride_h, sw = (int)stride_w;
  const int kw_first = wp % sw, ow_first = wp / sw;
  float sum = 0.0f;
  for (int kh = hp % sh, oh = hp / sh; kh < (int)kernel_h && oh >= 0; kh += sh, --oh) {
    if (oh >= (int)out_h) continue;
    for (int kw = kw_first, ow = ow_first; kw < (int)kernel_w && ow >= 0; kw += sw, --ow) {
      if (ow >= (int)out_w) continue;
      sum += COL_LOAD(col, col_c + (uint)(kh * (int)kernel_w + kw) * cols + oh * out_w + ow,
                      col_act);
    }
  }
  STORE(dx, dx_off + i, sum);
}
