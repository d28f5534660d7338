// Batch gathers by index table (raw rows, and image samples with normalisation and Philox
// augmentation), and the per-step counters they read: step_state [0] = batch position in the
// epoch's table, [1] = optimizer steps done. A batch running past the table, or an index
// outside the source, raises the error flag (DEVICE_ERROR_TABLE_POSITION / _GATHER_INDEX) and
// its rows are written as zeros instead of read.

// The source row of batch row r: table[position * rows + r], or -1 after raising the error
// flag (report: only one caller per row raises, the others just skip).
long source_row(__global const int* table, ulong table_off, uint table_size, uint rows,
                uint position, uint r, uint src_rows, bool report, __global int* flag,
                ulong flag_off) {
  const ulong entry = (ulong)position * rows + r;
  if ((ulong)(position + 1ul) * rows > table_size) {
    if (report) raise_error(flag, flag_off, DEVICE_ERROR_TABLE_POSITION, (int)position);
    return -1;
  }
  const int index = table[table_off + entry];
  if (index < 0 || (uint)index >= src_rows) {
    if (report) raise_error(flag, flag_off, DEVICE_ERROR_GATHER_INDEX, index);
    return -1;
  }
  return index;
}

// dst[r, :] = src[source_row(r), :] in units of 32-bit words or bytes (row_units per row).
#define GATHER_ROWS_KERNEL(NAME, UNIT)                                                          \
  __kernel void NAME(__global const UNIT* src, ulong src_off, uint src_rows, uint row_units,    \
                     __global const int* table, ulong table_off, uint table_size, uint rows,   \
                     __global const uint* state, ulong state_off, __global UNIT* dst,          \
                     ulong dst_off, __global int* flag, ulong flag_off) {                      \
    const uint i = get_global_id(0);                                                            \
    if (i >= rows * row_units) return;                                                          \
    const uint r = i / row_units, j = i - r * row_units;                                        \
    const long row = source_row(table, table_off, table_size, rows, state[state_off], r,        \
                                src_rows, j == 0, flag, flag_off);                              \
    dst[dst_off + i] = row < 0 ? (UNIT)0 : src[src_off + (ulong)row * row_units + j];           \
  }
GATHER_ROWS_KERNEL(gather_rows_u32, uint)
GATHER_ROWS_KERNEL(gather_rows_u8, uchar)

// dst[i, c, h, w] = (raw * scale - mean[c]) * inv_std[c], raw = the source sample's pixel at
// (h + shift_h, flip ? W-1-w : w + shift_w), 0 outside (SampleTransform). The shifts and the
// flip come from Philox keyed by seed with counter (sample_offset + i, stream, step_state[1]):
// the same draws as kernels/cpu/gather.cpp and the reference. src holds u8 (src_is_u8) or f32
// samples [src_rows, C, H, W]; src_off is in bytes. Work-groups of 256 cover `chunks` pieces of
// one sample each; work-item 0 draws and checks the sample for the group. A sample that cannot
// be read is written as zeros. dst is act_t (storage.cl): a 16-bit batch is rounded once, from
// the float the transform computes.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void gather_samples(__global const uchar* src, ulong src_off, int src_is_u8, uint src_rows,
                    uint channels, uint height, uint width, uint chunks,
                    __global const int* table, ulong table_off, uint table_size, uint rows,
                    __global const uint* state, ulong state_off, float scale,
                    __global const float* mean, ulong mean_off, __global const float* inv_std,
                    ulong inv_std_off, int normalize, uint crop_padding, int horizontal_flip,
                    ulong seed, uint stream, ulong sample_offset, __global act_t* dst,
                    ulong dst_off, __global int* flag, ulong flag_off) {
  __local long sample_row;
  __local int shift_h, shift_w, flip;
  const uint i = get_group_id(0) / chunks, chunk = get_group_id(0) % chunks;
  if (get_local_id(0) == 0) {
    sample_row = source_row(table, table_off, table_size, rows, state[state_off], i, src_rows,
                            chunk == 0, flag, flag_off);
    shift_h = 0;
    shift_w = 0;
    flip = 0;
    if (crop_padding > 0 || horizontal_flip) {
      const ulong g = sample_offset + i;
      const uint4 r = philox4x32_10((uint)g, (uint)(g >> 32), stream, state[state_off + 1],
                                    (uint)seed, (uint)(seed >> 32));
      const ulong span = 2ul * crop_padding + 1ul;
      shift_h = (int)(((ulong)r.x * span) >> 32) - (int)crop_padding;
      shift_w = (int)(((ulong)r.y * span) >> 32) - (int)crop_padding;
      flip = horizontal_flip && (r.z >> 31) != 0;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint plane = height * width, sample = channels * plane;
  const uint e = chunk * 256 + get_local_id(0);
  if (e >= sample) return;
  const uint c = e / plane, h = (e - c * plane) / width, w = e - c * plane - h * width;
  const int sh = (int)h + shift_h, sw = (flip ? (int)(width - 1 - w) : (int)w) + shift_w;
  float raw = 0.0f;
  if (sample_row >= 0 && sh >= 0 && sh < (int)height && sw >= 0 && sw < (int)width) {
    const ulong at = (ulong)sample_row * sample + c * plane + (uint)sh * width + (uint)sw;
    raw = src_is_u8 ? (float)src[src_off + at] : ((__global const float*)(src + src_off))[at];
  }
  const float m = normalize ? mean[mean_off + c] : 0.0f;
  const float s = normalize ? inv_std[inv_std_off + c] : 1.0f;
  STORE(dst, dst_off + (ulong)i * sample + e, sample_row < 0 ? 0.0f : (raw * scale - m) * s);
}

__kernel void advance_step(__global uint* state, ulong state_off) {
  state[state_off] += 1u;
  state[state_off + 1] += 1u;
}
