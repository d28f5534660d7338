// GEMM kernels. Built two ways:
// - with -DTS_M=.. -DTS_N=.. -DTS_K=.. (one program per tile shape and operand types, after
//   storage.cl): the own tiled GEMM with a fused bias and ReLU epilogue, gemm_tiled; A and B are
//   float32, float16 or bfloat16 (-DAB_F16, -DAB_BF16), C float32 or 16-bit (-DC_F16, -DC_BF16),
//   and it always multiplies and accumulates in float;
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

  // Epilogue: alpha, beta C (beta == 0 never reads C), bias, ReLU.
#pragma unroll
  for (int i = 0; i < WPT_M; ++i) {
    const int gi = row0 + ty * WPT_M + i;
    if (gi >= M) break;
#pragma unroll
    for (int j = 0; j < WPT_N; ++j) {
      const int gj = col0 + tx + j * GEMM_SIDE;
      if (gj >= N) break;
      const int at = c_plane == 0 ? gi * ldc + gj
                                  : (gj / c_plane) * M * c_plane + gi * c_plane + gj % c_plane;
      float v = alpha * acc[i][j];
      if (beta != 0.0f) v += beta * LOAD_C(c, at);
      if (bias_kind == 1) v += bias[bias_off + gj];
      else if (bias_kind == 2) v += bias[bias_off + gi];
      STORE_C(c, at, relu && v < 0.0f ? 0.0f : v);  // NaN kept, as UnaryOp::relu
    }
  }
}

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
