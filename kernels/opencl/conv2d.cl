// The convolution's layout passes around its GEMMs (backends/opencl/ops_conv2d.cpp): the GEMMs
// work on "channel-major" matrices, the im2col columns [C*KH*KW + 1, L] (im2col.cl) and the
// product [OC, L], L = N*OH*OW, column j = n*OH*OW + oh*OW + ow, so that one GEMM covers every
// image of the batch; these kernels move between that layout and NCHW. y and dy are act_t
// (storage.cl); the columns and the product act_t in 16-bit runs whose GEMMs take 16-bit
// operands (col_act), else float; weights' gradients and biases float.

// y[n, oc, p] = product[oc, n*plane + p] + bias[oc] (has_bias == 0: no bias); plane = OH*OW.
// Only where CLBlast ran the forward GEMM: the own GEMM writes NCHW and the bias itself.
__kernel void conv_output_nchw(__global const float* product, ulong product_off,
                               __global act_t* y, ulong y_off, __global const float* bias,
                               ulong bias_off, int has_bias, uint batch, uint out_channels,
                               uint plane) {
  const uint i = get_global_id(0);
  if (i >= batch * out_channels * plane) return;
  const uint p = i % plane, oc = (i / plane) % out_channels, n = i / (plane * out_channels);
  const float v = product[product_off + oc * batch * plane + n * plane + p];
  STORE(y, y_off + i, has_bias ? v + bias[bias_off + oc] : v);
}

// dyt[oc, n*plane + p] = dy[n, oc, p]: the output gradient in the GEMMs' channel-major layout.
// dyt is act_t or float as the columns are (col_act, storage.cl).
__kernel void conv_grad_channel_major(__global const act_t* dy, ulong dy_off,
                                      __global uchar* dyt, ulong dyt_off, uint batch,
                                      uint out_channels, uint plane, int col_act) {
  const uint cols = batch * plane;
  const uint i = get_global_id(0);
  if (i >= out_channels * cols) return;
  const uint oc = i / cols, j = i - oc * cols, n = j / plane, p = j - n * plane;
  COL_STORE(dyt, dyt_off + i, LOAD(dy, dy_off + (n * out_channels + oc) * plane + p), col_act);
}

// wt[c, oc, t] = w[oc, c, KK - 1 - t] (t = kh * KW + kw, KK = KH * KW: both axes flipped):
// the weights of the stride-1 data gradient computed as a convolution of dy (ops_conv2d.cpp).
__kernel void conv_flip_weights(__global const act_t* w, ulong w_off, __global act_t* wt,
                                ulong wt_off, uint out_channels, uint channels, uint taps) {
  const uint i = get_global_id(0);
  if (i >= out_channels * channels * taps) return;
  const uint t = i % taps, oc = (i / taps) % out_channels, c = i / (taps * out_channels);
  STORE(wt, wt_off + i, LOAD(w, w_off + (oc * channels + c) * taps + (taps - 1 - t)));
}

// dw[oc, t] (t < taps - 1) and db[oc] (t = taps - 1: the ones row's column) = the sums over
// the rows of partial [rows, OC, taps], the weight-gradient GEMM's split-K slices, in slice
// order.
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
