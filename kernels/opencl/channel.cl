// Per-channel kernels over x viewed as [outer, channels, inner]: the affine map (bias adds,
// scales) and the channel sums (bias gradients, sums of squares, gradient norms).
//
// A channel's sum runs over its outer * inner values, cut into `pieces` contiguous ranges so
// that few channels with long runs (a gradient norm over a whole flat buffer: one channel, one
// run) still fill the device: each range is one work-group, which writes a partial sum; the
// finish kernel adds a channel's partials in piece order. pieces == 1 writes the result at once.
// Work-items add in Kahan-compensated float and groups combine by a fixed tree: the result is
// the same on every run and within about 1e-7 relative of the float64 sum. x and y are act_t
// (storage.cl); scales, shifts and sums float.

// y = x * scale[c] + shift[c] (has_scale / has_shift == 0: 1 / 0); y may be x.
__kernel void channel_affine(__global const act_t* x, ulong x_off, __global const float* scale,
                             ulong scale_off, int has_scale, __global const float* shift,
                             ulong shift_off, int has_shift, __global act_t* y, ulong y_off,
                             uint n, uint channels, uint inner) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint c = (i / inner) % channels;
  const float a = has_scale ? scale[scale_off + c] : 1.0f;
  const float b = has_shift ? shift[shift_off + c] : 0.0f;
  STORE(y, y_off + i, LOAD(x, x_off + i) * a + b);
}

// Walks positions k of one channel's [outer, inner] values in steps of `step` without a
// division per step: (o, i) = (k / inner, k % inner).
typedef struct {
  uint o, i, step_o, step_i;
} RunCursor;

RunCursor run_cursor(uint k, uint inner, uint step) {
  RunCursor r;
  r.o = k / inner;
  r.i = k - r.o * inner;
  r.step_o = step / inner;
  r.step_i = step - r.step_o * inner;
  return r;
}

void run_advance(RunCursor* r, uint inner) {
  r->o += r->step_o;
  r->i += r->step_i;
  if (r->i >= inner) {
    r->i -= inner;
    r->o += 1;
  }
}

// The flat index of channel c's value at the cursor.
uint run_at(const RunCursor* r, uint channels, uint c, uint inner) {
  return (r->o * channels + c) * inner + r->i;
}

// Stores a channel's sum: out[c] = beta * out[c] + sum (beta == 0: out not read) when the sum is
// whole (direct), else partial[piece * channels + c] = sum.
void store_channel_sum(float sum, uint c, uint piece, uint channels, int direct,
                       __global float* out, ulong out_off, float beta,
                       __global float* partial, ulong partial_off) {
  if (direct)
    out[out_off + c] = beta == 0.0f ? sum : beta * out[out_off + c] + sum;
  else
    partial[partial_off + (ulong)piece * channels + c] = sum;
}

// inner == 1 (the columns of a [rows, channels] matrix): work-groups of 32 columns x 8 row lanes,
// so that neighbouring work-items read neighbouring columns; group (column block, piece) sums
// rows [piece * rows_per_piece, ...) of its columns (times y when has_y).
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void channel_sums_columns(__global const act_t* x, ulong x_off, __global const act_t* y,
                          ulong y_off, int has_y, uint rows, uint channels,
                          uint rows_per_piece,
                          __global float* out, ulong out_off, float beta,
                          __global float* partial, ulong partial_off, int direct) {
  __local float lanes[8][32];
  const uint c = get_global_id(0), tx = get_local_id(0), lane = get_local_id(1);
  const uint piece = get_group_id(1);
  const uint r0 = piece * rows_per_piece, r1 = min(rows, r0 + rows_per_piece);
  float sum = 0.0f, carry = 0.0f;
  if (c < channels)
    for (uint r = r0 + lane; r < r1; r += 8) {
      const uint at = r * channels + c;
      const float v = LOAD(x, x_off + at);
      kahan_add(&sum, &carry, has_y ? v * LOAD(y, y_off + at) : v);
    }
  lanes[lane][tx] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane != 0 || c >= channels) return;
  float total = 0.0f;
  for (int l = 0; l < 8; ++l) total += lanes[l][tx];
  store_channel_sum(total, c, piece, channels, direct, out, out_off, beta, partial, partial_off);
}

// inner > 1: one work-group of REDUCE_GROUP per (channel, piece), group id piece * channels + c;
// the piece is positions [piece * per_piece, ...) of the channel's outer * inner values.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void channel_sums_runs(__global const act_t* x, ulong x_off, __global const act_t* y, ulong y_off,
                       int has_y, uint outer, uint channels, uint inner, uint per_piece,
                       __global float* out, ulong out_off, float beta,
                       __global float* partial, ulong partial_off, int direct) {
  __local float sums[REDUCE_GROUP];
  const uint lid = get_local_id(0), c = get_group_id(0) % channels;
  const uint piece = get_group_id(0) / channels;
  const uint k0 = piece * per_piece, k1 = min(outer * inner, k0 + per_piece);
  float sum = 0.0f, carry = 0.0f;
  RunCursor r = run_cursor(k0 + lid, inner, REDUCE_GROUP);
  for (uint k = k0 + lid; k < k1; k += REDUCE_GROUP, run_advance(&r, inner)) {
    const uint at = run_at(&r, channels, c, inner);
    const float v = LOAD(x, x_off + at);
    kahan_add(&sum, &carry, has_y ? v * LOAD(y, y_off + at) : v);
  }
  sums[lid] = sum;
  local_sum(sums);
  if (lid == 0)
    store_channel_sum(sums[0], c, piece, channels, direct, out, out_off, beta, partial,
                      partial_off);
}

// out[c] = beta * out[c] + the sum of partial[0..pieces, c] in piece order.
__kernel void channel_sums_finish(__global const float* partial, ulong partial_off, uint pieces,
                                  uint channels, __global float* out, ulong out_off, float beta) {
  const uint c = get_global_id(0);
  if (c >= channels) return;
  float sum = 0.0f, carry = 0.0f;
  for (uint p = 0; p < pieces; ++p)
    kahan_add(&sum, &carry, partial[partial_off + (ulong)p * channels + c]);
  out[out_off + c] = beta == 0.0f ? sum : beta * out[out_off + c] + sum;
}
