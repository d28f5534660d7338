// GEMM kernels. Built two ways:
// - with -DTS_M=.. -DTS_N=.. -DTS_K=.. (one program per tile shape and operand types, after
//   storage.cl): the own tiled GEMM with a fused bias and ReLU epilogue, gemm_tiled; A and B are
//   float32, float16 or bfloat16 (-DAB_F16, -DAB_BF16), C float32 or 16-bit (-DC_F16, -DC_BF16),
//   and it always multiplies and accumulates in float;
//   With -DMMA (and 16-bit A and B) the same kernel multiplies on NVIDIA tensor cores through
//   inline PTX (-DMMA_EMULATE: the same fragments multiplied in float, for tests elsewhere);
// - without TS_M, as part of the main program (after elementwise.cl, whose unary_apply they use):
//   the epilogue kernels for products computed elsewhere, gemm_epilogue (after CLBlast, or any
//   activation other than ReLU after gemm_tiled) and split_k_sum (the end of a split-K product),
//   C of the program's act_t.
// Backends/opencl/gemm_engine.cpp decides which runs.

#ifdef TS_M
#if defined(AB_F16)
typedef ushort ab_t;
#define LOAD_AB(p, i) LOAD_F16(p, i)
#elif defined(AB_BF16)
typedef ushort ab_t;
#define LOAD_AB(p, i) LOAD_BF16(p, i)
#else
typedef float ab_t;
#define LOAD_AB(p, i) LOAD_F32(p, i)
#endif
#if defined(C_F16)
typedef ushort c_t;
#define LOAD_C(p, i) LOAD_F16(p, i)
#define STORE_C(p, i, v) STORE_F16(p, i, v)
#elif defined(C_BF16)
typedef ushort c_t;
#define LOAD_C(p, i) LOAD_BF16(p, i)
#define STORE_C(p, i, v) STORE_BF16(p, i, v)
#else
typedef float c_t;
#define LOAD_C(p, i) LOAD_F32(p, i)
#define STORE_C(p, i, v) STORE_F32(p, i, v)
#endif

// C[M,N] = alpha op(A) op(B) + beta C (+ bias per column / per row) (ReLU), for `batch` GEMMs at
// once (get_group_id(2) is the batch index, each operand stepping by its batch stride; the last
// one multiplies k_last terms instead of k: a split-K product's tail rides in the same launch).
// op(A)[i, p] = a[i * a_rs + p * a_cs] and op(B)[p, j] = b[p * b_rs + j * b_cs]: the host turns
// transposes and leading dimensions into these two strides, so one kernel serves all four cases.
// A work-group of 16 x 16 work-items computes a TS_M x TS_N tile of C; work-item (tx, ty) owns
// rows ty*WPT_M .. +WPT_M (contiguous: its A values in local memory are neighbours) and columns
// tx, tx+16, .. (strided: a half-warp reads 16 neighbouring B values, and stores to C coalesce).
// c_plane > 0 stores C[r, j] at c[(j / c_plane) * M * c_plane + r * c_plane + j % c_plane]: a
// convolution's [OC, N*OH*OW] product written straight into its NCHW output (ldc unused).
// Indices inside one matrix are int: the host only calls this when they fit in 31 bits.

// The epilogue of both GEMM kernels for C[gi, gj] (inside C): alpha acc, + beta C (beta == 0
// never reads C), + the bias, ReLU (NaN kept, as UnaryOp::relu). c_plane > 0: C is a
// convolution's NCHW output (see gemm_tiled below).
inline void store_c(__global c_t* c, int M, int ldc, uint c_plane, int gi, int gj, float acc,
                    float alpha, float beta, __global const float* bias, ulong bias_off,
                    int bias_kind, int relu) {
  const int at = c_plane == 0 ? gi * ldc + gj
                              : (gj / c_plane) * M * c_plane + gi * c_plane + gj % c_plane;
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * LOAD_C(c, at);
  if (bias_kind == 1) v += bias[bias_off + gj];
  else if (bias_kind == 2) v += bias[bias_off + gi];
  STORE_C(c, at, relu && v < 0.0f ? 0.0f : v);
}

#ifdef MMA
// The same product on NVIDIA tensor cores (compute capability 8.0+, A and B 16-bit: -DAB_F16 or
// -DAB_BF16), through inline PTX: NVIDIA's OpenCL compiler passes asm() to its PTX back end,
// and mma.sync needs no half type, only 32-bit registers that each hold two 16-bit values.
// A work-group of 4 warps computes a 64 x 64 tile of C, warp w the 32 x 32 quarter
// (w / 2, w % 2): 2 x 4 mma.m16n8k16 tiles, float accumulators. K advances 32 at a time through
// local memory, where both operands are kept K-contiguous as pairs (the layout the MMA
// fragments read: As[i][q] = op(A)[i, 2q] | op(A)[i, 2q+1] << 16, Bs[j][q] likewise down a
// column of op(B)); rows are padded by 4 words so that a fragment's 32 loads hit 32 banks.
// Fragment layout (PTX ISA, mma.m16n8k16 with .f16/.bf16): lane = 4 g + t; A registers hold
// rows g and g + 8, K pairs t and t + 4; B registers column g, K pairs t and t + 4; the four
// results are rows g and g + 8, columns 2t and 2t + 1.
#if defined(AB_BF16)
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif
#define MMA_TILE 64
#define MMA_PAIRS 16               // K pairs per slice (32 values)
#define MMA_ROW (MMA_PAIRS + 4)    // words per local row
#define MMA_THREADS 128

#ifdef MMA_EMULATE
// Tests on devices without tensor cores (TRIDENT_OPENCL_TENSOR_CORES=emulate): each mma.m16n8k16
// done by its warp's 32 work-items exchanging their fragments through local memory, products in
// float, so that PoCL checks this kernel's tiling, fragment layout and epilogue. Slow.
inline float mma_value(uint bits) {
#if defined(AB_BF16)
  return as_float(bits << 16);
#else
  const ushort h = (ushort)bits;
  return vload_half(0, &h);
#endif
}
inline void mma_16816(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                      __local uint* xa, __local uint* xb) {
  const int tid = get_local_id(0), lane = tid & 31, base = tid - lane;
  const int g = lane >> 2, t = lane & 3;
  xa[tid * 4] = a0, xa[tid * 4 + 1] = a1, xa[tid * 4 + 2] = a2, xa[tid * 4 + 3] = a3;
  xb[tid * 2] = b0, xb[tid * 2 + 1] = b1;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r >> 1) * 8, col = 2 * t + (r & 1);
    float sum = d[r];
    for (int kk = 0; kk < 16; ++kk) {
      // A(row, kk): lane 4 (row % 8) + (kk % 8) / 2, register (row >= 8) + 2 (kk >= 8);
      // B(kk, col): lane 4 col + (kk % 8) / 2, register (kk >= 8); the half: kk % 2.
      const uint wa = xa[(base + 4 * (row & 7) + ((kk & 7) >> 1)) * 4 + (row >> 3) + 2 * (kk >> 3)];
      const uint wb = xb[(base + 4 * col + ((kk & 7) >> 1)) * 2 + (kk >> 3)];
      sum += mma_value((kk & 1) ? wa >> 16 : wa & 0xffffu) *
             mma_value((kk & 1) ? wb >> 16 : wb & 0xffffu);
    }
    d[r] = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#define MMA_CALL(d, a0, a1, a2, a3, b0, b1) mma_16816(d, a0, a1, a2, a3, b0, b1, xa, xb)
#else
inline void mma_16816(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  float e0, e1, e2, e3;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(e0), "=f"(e1), "=f"(e2), "=f"(e3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]),
                 "f"(d[2]), "f"(d[3]));
  d[0] = e0, d[1] = e1, d[2] = e2, d[3] = e3;
}
#define MMA_CALL(d, a0, a1, a2, a3, b0, b1) mma_16816(d, a0, a1, a2, a3, b0, b1)
#endif

__kernel __attribute__((reqd_work_group_size(MMA_THREADS, 1, 1)))
void gemm_tiled(uint m, uint n, uint k, uint k_last,
                __global const ab_t* a, ulong a_off, int a_rs, int a_cs, ulong a_batch,
                __global const ab_t* b, ulong b_off, int b_rs, int b_cs, ulong b_batch,
                __global c_t* c, ulong c_off, int ldc, uint c_plane, ulong c_batch,
                float alpha, float beta,
                __global const float* bias, ulong bias_off, int bias_kind, int relu) {
  __local uint As[MMA_TILE * MMA_ROW];
  __local uint Bs[MMA_TILE * MMA_ROW];
#ifdef MMA_EMULATE
  __local uint xa[MMA_THREADS * 4], xb[MMA_THREADS * 2];
#endif
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const int row0 = get_group_id(1) * MMA_TILE, col0 = get_group_id(0) * MMA_TILE;
  const ulong batch = get_group_id(2);
  a += a_off + batch * a_batch;
  b += b_off + batch * b_batch;
  c += c_off + batch * c_batch;
  const int M = m, N = n, K = batch + 1 == get_num_groups(2) ? k_last : k;
  const bool a_along_k = a_cs == 1, b_along_n = b_cs == 1;
  float acc[2][4][4];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
  for (int p0 = 0; p0 < K; p0 += 2 * MMA_PAIRS) {
    // 64 rows x 16 pairs of each operand, 8 pairs a work-item, neighbours along the operand's
    // contiguous axis; past the edges, zeros.
    for (int l = 0; l < MMA_TILE * MMA_PAIRS / MMA_THREADS; ++l) {
      const int e = tid + l * MMA_THREADS;
      const int i = a_along_k ? e / MMA_PAIRS : e % MMA_TILE;
      const int q = a_along_k ? e % MMA_PAIRS : e / MMA_TILE;
      const int gi = row0 + i, gp = p0 + 2 * q;
      uint lo = 0, hi = 0;
      if (gi < M && gp < K) lo = a[gi * a_rs + gp * a_cs];
      if (gi < M && gp + 1 < K) hi = a[gi * a_rs + (gp + 1) * a_cs];
      As[i * MMA_ROW + q] = lo | hi << 16;
    }
    for (int l = 0; l < MMA_TILE * MMA_PAIRS / MMA_THREADS; ++l) {
      const int e = tid + l * MMA_THREADS;
      const int j = b_along_n ? e % MMA_TILE : e / MMA_PAIRS;
      const int q = b_along_n ? e / MMA_TILE : e % MMA_PAIRS;
      const int gj = col0 + j, gp = p0 + 2 * q;
      uint lo = 0, hi = 0;
      if (gj < N && gp < K) lo = b[gp * b_rs + gj * b_cs];
      if (gj < N && gp + 1 < K) hi = b[(gp + 1) * b_rs + gj * b_cs];
      Bs[j * MMA_ROW + q] = lo | hi << 16;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int qb = 0; qb < MMA_PAIRS; qb += 8) {  // two k16 steps
      uint af[2][4], bf[4][2];
      for (int mi = 0; mi < 2; ++mi) {
        const int r = (wm + mi * 16 + g) * MMA_ROW + qb + t;
        af[mi][0] = As[r];
        af[mi][1] = As[r + 8 * MMA_ROW];
        af[mi][2] = As[r + 4];
        af[mi][3] = As[r + 8 * MMA_ROW + 4];
      }
      for (int ni = 0; ni < 4; ++ni) {
        const int r = (wn + ni * 8 + g) * MMA_ROW + qb + t;
        bf[ni][0] = Bs[r];
        bf[ni][1] = Bs[r + 4];
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni)
          MMA_CALL(acc[mi][ni], af[mi][0], af[mi][1], af[mi][2], af[mi][3], bf[ni][0],
                   bf[ni][1]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 4; ++ni)
      for (int r = 0; r < 4; ++r) {
        const int gi = row0 + wm + mi * 16 + g + (r >> 1) * 8;
        const int gj = col0 + wn + ni * 8 + 2 * t + (r & 1);
        if (gi < M && gj < N)
          store_c(c, M, ldc, c_plane, gi, gj, acc[mi][ni][r], alpha, beta, bias, bias_off,
                  bias_kind, relu);
      }
}

#else  // the float-arithmetic tiled kernel

#define GEMM_SIDE 16
#define GEMM_THREADS (GEMM_SIDE * GEMM_SIDE)
#define WPT_M (TS_M / GEMM_SIDE)
#define WPT_N (TS_N / GEMM_SIDE)
#define A_LOADS (TS_M * TS_K / GEMM_THREADS)
#define B_LOADS (TS_N * TS_K / GEMM_THREADS)
// Rows of the local tiles are padded by 4 floats: stores along K then spread over the banks,
// and every row still starts 16-byte aligned (vector reads of the A micro-tile).
#define A_ROW (TS_M + 4)
#define B_ROW (TS_N + 4)

__kernel __attribute__((reqd_work_group_size(GEMM_SIDE, GEMM_SIDE, 1)))
void gemm_tiled(uint m, uint n, uint k, uint k_last,
                __global const ab_t* a, ulong a_off, int a_rs, int a_cs, ulong a_batch,
                __global const ab_t* b, ulong b_off, int b_rs, int b_cs, ulong b_batch,
                __global c_t* c, ulong c_off, int ldc, uint c_plane, ulong c_batch,
                float alpha, float beta,
                __global const float* bias, ulong bias_off, int bias_kind, int relu) {
  // float4-typed so that a work-item's WPT_M neighbouring A values load as 16-byte vectors.
  __local float4 As4[TS_K * A_ROW / 4];
  __local float* As = (__local float*)As4;  // As[p * A_ROW + i] = op(A)[row0 + i, p0 + p]
  __local float Bs[TS_K * B_ROW];  // Bs[p * B_ROW + j] = op(B)[p0 + p, col0 + j]
  const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * GEMM_SIDE + tx;
  const int row0 = get_group_id(1) * TS_M, col0 = get_group_id(0) * TS_N;
  const ulong batch = get_group_id(2);
  a += a_off + batch * a_batch;
  b += b_off + batch * b_batch;
  c += c_off + batch * c_batch;
  const int M = m, N = n, K = batch + 1 == get_num_groups(2) ? k_last : k;
  // Which way neighbouring work-items walk when loading: along the operand's contiguous axis.
  const bool a_along_k = a_cs == 1, b_along_n = b_cs == 1;

  float acc[WPT_M][WPT_N];
#pragma unroll
  for (int i = 0; i < WPT_M; ++i)
#pragma unroll
    for (int j = 0; j < WPT_N; ++j) acc[i][j] = 0.0f;

  // The next K-slice's A and B values are loaded into registers while the current one is
  // multiplied out of local memory, so the global load latency hides behind the FMAs even with
  // one work-group per compute unit.
  float a_next[A_LOADS], b_next[B_LOADS];
#define LOAD_A(P0)                                                                             \
  for (int l = 0; l < A_LOADS; ++l) {                                                          \
    const int e = tid + l * GEMM_THREADS;                                                      \
    const int i = a_along_k ? e / TS_K : e % TS_M, p = a_along_k ? e % TS_K : e / TS_M;        \
    const int gi = row0 + i, gp = (P0) + p;                                                    \
    a_next[l] = (gi < M && gp < K) ? LOAD_AB(a, gi * a_rs + gp * a_cs) : 0.0f;                 \
  }
#define LOAD_B(P0)                                                                             \
  for (int l = 0; l < B_LOADS; ++l) {                                                          \
    const int e = tid + l * GEMM_THREADS;                                                      \
    const int j = b_along_n ? e % TS_N : e / TS_K, p = b_along_n ? e / TS_N : e % TS_K;        \
    const int gj = col0 + j, gp = (P0) + p;                                                    \
    b_next[l] = (gj < N && gp < K) ? LOAD_AB(b, gp * b_rs + gj * b_cs) : 0.0f;                 \
  }
#pragma unroll
  LOAD_A(0)
#pragma unroll
  LOAD_B(0)
  for (int p0 = 0; p0 < K; p0 += TS_K) {
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int e = tid + l * GEMM_THREADS;
      const int i = a_along_k ? e / TS_K : e % TS_M, p = a_along_k ? e % TS_K : e / TS_M;
      As[p * A_ROW + i] = a_next[l];
    }
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
      const int e = tid + l * GEMM_THREADS;
      const int j = b_along_n ? e % TS_N : e / TS_K, p = b_along_n ? e / TS_N : e % TS_K;
      Bs[p * B_ROW + j] = b_next[l];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Past the end every load is masked to 0: no branch around them.
#pragma unroll
    LOAD_A(p0 + TS_K)
#pragma unroll
    LOAD_B(p0 + TS_K)
#pragma unroll
    for (int p = 0; p < TS_K; ++p) {
      float af[WPT_M], bf[WPT_N];
#if WPT_M % 4 == 0
#pragma unroll
      for (int q = 0; q < WPT_M / 4; ++q) {
        const float4 v = As4[(p * A_ROW + ty * WPT_M) / 4 + q];
        af[4 * q] = v.x; af[4 * q + 1] = v.y; af[4 * q + 2] = v.z; af[4 * q + 3] = v.w;
      }
#else
#pragma unroll
      for (int i = 0; i < WPT_M; ++i) af[i] = As[p * A_ROW + ty * WPT_M + i];
#endif
#pragma unroll
      for (int j = 0; j < WPT_N; ++j) bf[j] = Bs[p * B_ROW + tx + j * GEMM_SIDE];
#pragma unroll
      for (int i = 0; i < WPT_M; ++i)
#pragma unroll
        for (int j = 0; j < WPT_N; ++j) acc[i][j] = fma(af[i], bf[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#undef LOAD_A
#undef LOAD_B

#pragma unroll
  for (int i = 0; i < WPT_M; ++i) {
    const int gi = row0 + ty * WPT_M + i;
    if (gi >= M) break;
#pragma unroll
    for (int j = 0; j < WPT_N; ++j) {
      const int gj = col0 + tx + j * GEMM_SIDE;
      if (gj >= N) break;
      store_c(c, M, ldc, c_plane, gi, gj, acc[i][j], alpha, beta, bias, bias_off, bias_kind,
              relu);
    }
  }
}

#endif  // MMA

#else  // the main program's epilogue kernels

// After a GEMM computed elsewhere: c[r, col] (row stride ldc, m x n) gets + bias (kind 1:
// bias[col], 2: bias[r]), then the activation (a UNARY_* code). rescale: C = beta C first (the
// k == 0 product, where CLBlast is not called; beta == 0 does not read C).
__kernel void gemm_epilogue(__global act_t* c, ulong c_off, uint ldc, uint m, uint n,
                            __global const float* bias, ulong bias_off, int bias_kind,
                            int activation, float activation_alpha, int rescale, float beta) {
  const uint i = get_global_id(0);
  if (i >= m * n) return;
  const uint r = i / n, col = i - r * n;
  const ulong at = c_off + (ulong)r * ldc + col;
  float v = rescale ? (beta == 0.0f ? 0.0f : beta * LOAD(c, at)) : LOAD(c, at);
  if (bias_kind == 1) v += bias[bias_off + col];
  else if (bias_kind == 2) v += bias[bias_off + r];
  STORE(c, at, unary_apply(activation, v, activation_alpha));
}

// The end of a split-K GEMM: C[i, j] = the sum over s < slices of partial[s, i, j] (in slice
// order) + beta C (beta == 0 never reads C) + bias per column (1) or per row (2), then the
// activation. partial is [slices, m, n] packed; C has row stride ldc.
__kernel void split_k_sum(__global const float* partial, ulong partial_off, uint slices, uint m,
                          uint n, __global act_t* c, ulong c_off, uint ldc, float beta,
                          __global const float* bias, ulong bias_off, int bias_kind,
                          int activation, float activation_alpha) {
  const uint idx = get_global_id(0);
  if (idx >= m * n) return;
  const uint i = idx / n, j = idx - i * n;
  float v = 0.0f;
  for (uint s = 0; s < slices; ++s) v += partial[partial_off + (ulong)s * m * n + idx];
  const ulong at = c_off + (ulong)i * ldc + j;
  if (beta != 0.0f) v += beta * LOAD(c, at);
  if (bias_kind == 1) v += bias[bias_off + j];
  else if (bias_kind == 2) v += bias[bias_off + i];
  STORE(c, at, unary_apply(activation, v, activation_alpha));
}

#endif
