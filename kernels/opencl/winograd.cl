// 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) (backends/opencl/
// ops_conv2d_winograd.cpp drives them; kernels/cuda/winograd.h has the same kernels in CUDA and
// kernels/cpu/winograd.h the algebra). Each kernel transforms its operands in local memory: no
// Winograd-domain array goes through global memory. Local memory stays under 48 KB a work-group
// (NVIDIA's OpenCL limit): 32 KB in the convolution, 36 KB in the weight gradient.
// x, w, y and dy are act_t (storage.cl: float32, or 16-bit in the f16 and bf16 programs), loaded
// into float; the transforms, products and sums are float, U and the weight gradient's partials
// float32, and y (dx) is rounded once.
//
// Tiles are 2x2 output blocks: a sample's TH x TW of them (TH = ceil(OH / 2)), tile index
// n * tiles + ty * TW + tx over the batch; tile (ty, tx) reads x's 4x4 block at rows
// 2 ty - ph .. + 3 and columns 2 tx - pw .. + 3 (zero outside the image).

#define WINO_TILES 32     // tiles a convolution work-group
#define WINO_OUT 32       // output channels a work-group (and input channels in the gradient)
#define WINO_CHUNK 8      // input channels a pass of the convolution
#define WINO_GRAD_TILES 8 // tiles a pass of the weight gradient
#define WINO_ROW (WINO_OUT + 4)  // the weight gradient's local rows: 16-byte aligned

// v[16] = B^T d B of a 4x4 block d (rows d0 - d2, d1 + d2, d2 - d1, d1 - d3, on both axes).
inline void wino_input_transform(float d[4][4], float v[16]) {
  float b[4][4];
  for (int k = 0; k < 4; ++k) {
    b[0][k] = d[0][k] - d[2][k];
    b[1][k] = d[1][k] + d[2][k];
    b[2][k] = d[2][k] - d[1][k];
    b[3][k] = d[1][k] - d[3][k];
  }
  for (int r = 0; r < 4; ++r) {
    v[r * 4 + 0] = b[r][0] - b[r][2];
    v[r * 4 + 1] = b[r][1] + b[r][2];
    v[r * 4 + 2] = b[r][2] - b[r][1];
    v[r * 4 + 3] = b[r][1] - b[r][3];
  }
}

// U[xi][c][o] = (G k G^T)[xi], k the 3x3 kernel of output channel o and input channel c: w[o, c]
// (w [OC, C, 3, 3]), or, when flipped (a data gradient: channels = the forward's OC), w[c, o]
// turned by 180 degrees. One work-item per (c, o).
__kernel void winograd_kernel(__global const act_t* w, ulong w_off, __global float* U,
                              ulong U_off, uint C, uint OC, int flipped) {
  const uint i = get_global_id(0), total = C * OC;
  if (i >= total) return;
  const uint c = i / OC, o = i - c * OC;
  const ulong src = w_off + (flipped ? ((ulong)c * OC + o) : ((ulong)o * C + c)) * 9;
  float k[9];
  for (int e = 0; e < 9; ++e) k[e] = LOAD(w, src + (flipped ? 8 - e : e));
  float q[4][3];  // G k
  for (int b = 0; b < 3; ++b) {
    q[0][b] = k[b];
    q[1][b] = 0.5f * (k[b] + k[3 + b] + k[6 + b]);
    q[2][b] = 0.5f * (k[b] - k[3 + b] + k[6 + b]);
    q[3][b] = k[6 + b];
  }
  __global float* out = U + U_off + i;
  for (int a = 0; a < 4; ++a) {  // (G k) G^T
    out[(a * 4 + 0) * total] = q[a][0];
    out[(a * 4 + 1) * total] = 0.5f * (q[a][0] + q[a][1] + q[a][2]);
    out[(a * 4 + 2) * total] = 0.5f * (q[a][0] - q[a][1] + q[a][2]);
    out[(a * 4 + 3) * total] = q[a][2];
  }
}

// y [N, OC, OH, OW] = conv(x, the kernel whose transform is U) (+ bias). Work-group (tile block,
// output-channel block) of 256: per chunk of 8 input channels each work-item transforms one
// (tile, channel) block into Vs[16][8][32], the group copies U's slice into Us[16][8][32], and
// work-item (xi, 8 channels, 8 tiles) adds its 8x8 outer products into 64 registers; the sums
// then pass through local memory in two halves of the output channels (Ms[16][16][32]) to the
// inverse transform A^T m A.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void winograd_conv(__global const act_t* x, ulong x_off, __global const float* U, ulong U_off,
                   __global const float* bias, ulong bias_off, int has_bias, __global act_t* y,
                   ulong y_off, uint C, uint OC, uint H, uint W, uint OH, uint OW, int ph, int pw,
                   uint TW, uint tiles, uint total) {
  __local float shared[16 * WINO_CHUNK * (WINO_TILES + WINO_OUT)];  // 32 KB
  __local float* Vs = shared;                               // [16][CHUNK][TILES]
  __local float* Us = shared + 16 * WINO_CHUNK * WINO_TILES;  // [16][CHUNK][OUT]
  __local float* Ms = shared;                               // [16][OUT / 2][TILES]
  const int tid = get_local_id(0);
  const uint tile0 = get_group_id(0) * WINO_TILES, oc0 = get_group_id(1) * WINO_OUT;
  // Each work-item's share of the fills is the same in every chunk, so that its addresses and
  // bounds are worked out once (the CUDA kernel: index arithmetic was half its instructions).
  // x: tile fill_tile's 4x4 block in channel fill_channel of each chunk; `inside` has bit
  // r * 4 + k set where the block's element (r, k) lies in the image.
  const int fill_tile = tid % WINO_TILES, fill_channel = tid / WINO_TILES;
  const uint fill_index = tile0 + fill_tile;
  ulong x_sample = x_off;
  long origin = 0;  // the block's top-left element in a channel's plane (may lie outside it)
  uint inside = 0;
  if (fill_index < total) {
    const uint n = fill_index / tiles, tile = fill_index - n * tiles, ty = tile / TW;
    const uint tx = tile - ty * TW;
    const int y0 = 2 * (int)ty - ph, x0 = 2 * (int)tx - pw;
    origin = (long)y0 * W + x0;
    x_sample = x_off + (ulong)n * C * H * W;
    for (int e = 0; e < 16; ++e) {
      const int iy = y0 + e / 4, ix = x0 + e % 4;
      if (iy >= 0 && iy < (int)H && ix >= 0 && ix < (int)W) inside |= 1u << e;
    }
  }
  const ulong plane = (ulong)H * W;
  // U: output channel oc0 + u_out and channel u_channel of the chunk, every xi (the k-th element
  // of Us with k = tid + 256 * xi).
  const int u_out = tid % WINO_OUT, u_channel = tid / WINO_OUT;
  const int xi = tid / 16, ob = (tid / 4) % 4, tb = tid % 4;
  float acc[8][8];
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) acc[a][b] = 0.0f;

  for (uint c0 = 0; c0 < C; c0 += WINO_CHUNK) {
    {
      const uint c = c0 + fill_channel;
      const uint valid = c < C ? inside : 0u;
      const long offset = (long)x_sample + (long)(valid ? c : 0) * (long)plane + origin;
      float d[4][4], v[16];
      for (int r = 0; r < 4; ++r)
        for (int k = 0; k < 4; ++k)
          d[r][k] = (valid >> (r * 4 + k)) & 1u ? LOAD(x, offset + (long)r * W + k) : 0.0f;
      wino_input_transform(d, v);
      for (int e = 0; e < 16; ++e)
        Vs[(e * WINO_CHUNK + fill_channel) * WINO_TILES + fill_tile] = v[e];
    }
    {
      const uint c = c0 + u_channel, oc = oc0 + u_out;
      const int ok = c < C && oc < OC;
      const ulong src = U_off + (ok ? (ulong)c * OC + oc : 0);
      const ulong step = (ulong)C * OC;
      for (int e = 0; e < 16; ++e) Us[tid + 256 * e] = ok ? U[src + e * step] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int cc = 0; cc < WINO_CHUNK; ++cc) {
      const float4 ua = vload4(0, Us + (xi * WINO_CHUNK + cc) * WINO_OUT + ob * 8);
      const float4 ub = vload4(1, Us + (xi * WINO_CHUNK + cc) * WINO_OUT + ob * 8);
      const float4 va = vload4(0, Vs + (xi * WINO_CHUNK + cc) * WINO_TILES + tb * 8);
      const float4 vb = vload4(1, Vs + (xi * WINO_CHUNK + cc) * WINO_TILES + tb * 8);
      const float u[8] = {ua.x, ua.y, ua.z, ua.w, ub.x, ub.y, ub.z, ub.w};
      const float v[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
      for (int a = 0; a < 8; ++a)
        for (int b = 0; b < 8; ++b) acc[a][b] = fma(u[a], v[b], acc[a][b]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  // The inverse transform: work-item (tile j, output channels o0 + 8 i of each half).
  const int j = tid % WINO_TILES, o0 = tid / WINO_TILES;
  const uint index = tile0 + j;
  uint oy = 0, ox = 0;
  ulong y_tile = y_off;
  if (index < total) {
    const uint n = index / tiles, tile = index - n * tiles, ty = tile / TW, tx = tile - ty * TW;
    oy = 2 * ty;
    ox = 2 * tx;
    y_tile = y_off + (ulong)n * OC * OH * OW + (ulong)oy * OW + ox;
  }
  for (int part = 0; part < 2; ++part) {  // output channels part * 16 .. + 15
    if (ob / 2 == part)
      for (int a = 0; a < 8; ++a) {
        __local float* row = Ms + (xi * (WINO_OUT / 2) + (ob % 2) * 8 + a) * WINO_TILES + tb * 8;
        vstore4((float4)(acc[a][0], acc[a][1], acc[a][2], acc[a][3]), 0, row);
        vstore4((float4)(acc[a][4], acc[a][5], acc[a][6], acc[a][7]), 1, row);
      }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = o0; o < WINO_OUT / 2 && index < total; o += 256 / WINO_TILES) {
      const uint oc = oc0 + part * (WINO_OUT / 2) + o;
      if (oc >= OC) break;
      float m[4][4];
      for (int e = 0; e < 16; ++e) m[e / 4][e % 4] = Ms[(e * (WINO_OUT / 2) + o) * WINO_TILES + j];
      float a[2][4];  // A^T m: rows m0 + m1 + m2, m1 - m2 - m3
      for (int q = 0; q < 4; ++q) {
        a[0][q] = m[0][q] + m[1][q] + m[2][q];
        a[1][q] = m[1][q] - m[2][q] - m[3][q];
      }
      const float b = has_bias ? bias[bias_off + oc] : 0.0f;
      const ulong out = y_tile + (ulong)oc * OH * OW;
      for (int r = 0; r < 2; ++r) {
        if (oy + r >= OH) break;
        STORE(y, out + r * OW, a[r][0] + a[r][1] + a[r][2] + b);
        if (ox + 1 < OW) STORE(y, out + r * OW + 1, a[r][1] - a[r][2] - a[r][3] + b);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

// The weight gradient's partial sums, F(3x3, 2x2): partial[slice][xi][o][c] = the sum over the
// slice's tiles of (A e A^T)[xi] (B^T d B)[xi], e dy's 2x2 block of output channel o, d x's 4x4
// block of input channel c. Work-group (slice, output-channel block, input-channel block) of
// 256: per pass of 8 tiles the group transforms dy's and x's blocks into Es and Vs
// ([16][8][36], channels the fastest), then work-item (xi, 8 output channels, 8 input channels)
// adds the outer products into 64 registers.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void winograd_weight_partials(__global const act_t* x, ulong x_off, __global const act_t* dy,
                              ulong dy_off, __global float* partial, ulong partial_off, uint C,
                              uint OC, uint H, uint W, uint OH, uint OW, int ph, int pw, uint TW,
                              uint tiles, uint total, uint slice_tiles) {
  __local float Es[16 * WINO_GRAD_TILES * WINO_ROW];  // 18 KB each
  __local float Vs[16 * WINO_GRAD_TILES * WINO_ROW];
  const int tid = get_local_id(0);
  const uint slice = get_group_id(0), oc0 = get_group_id(1) * WINO_OUT;
  const uint c0 = get_group_id(2) * WINO_OUT;
  const uint first = slice * slice_tiles, last = min(first + slice_tiles, total);
  const int xi = tid / 16, ob = (tid / 4) % 4, cb = tid % 4;
  const int stride = WINO_GRAD_TILES * WINO_ROW;  // from one xi to the next
  float acc[8][8];
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) acc[a][b] = 0.0f;

  for (uint chunk = first; chunk < last; chunk += WINO_GRAD_TILES) {
    {  // one (tile, channel) a work-item: WINO_GRAD_TILES x 32 = 256
      const int j = tid % WINO_GRAD_TILES, ch = tid / WINO_GRAD_TILES;
      const uint index = chunk + j;
      // dy's 2x2 block (bit r * 2 + k) and x's 4x4 block (bit r * 4 + k) inside their images,
      // the tile decomposed once for both.
      uint dy_valid = 0, x_valid = 0;
      long dy_offset = 0, x_offset = 0;
      if (index < last) {
        const uint n = index / tiles, tile = index - n * tiles, ty = tile / TW;
        const uint tx = tile - ty * TW;
        const int oy = 2 * (int)ty, ox = 2 * (int)tx, y0 = oy - ph, x0 = ox - pw;
        if (oc0 + ch < OC) {
          for (int e = 0; e < 4; ++e)
            if (oy + e / 2 < (int)OH && ox + e % 2 < (int)OW) dy_valid |= 1u << e;
          dy_offset = (long)dy_off + (long)(((ulong)n * OC + oc0 + ch) * OH * OW) +
                      (long)oy * OW + ox;
        }
        if (c0 + ch < C) {
          for (int e = 0; e < 16; ++e) {
            const int iy = y0 + e / 4, ix = x0 + e % 4;
            if (iy >= 0 && iy < (int)H && ix >= 0 && ix < (int)W) x_valid |= 1u << e;
          }
          x_offset = (long)x_off + (long)(((ulong)n * C + c0 + ch) * H * W) + (long)y0 * W + x0;
        }
      }
      float e[2][2];
      for (int r = 0; r < 2; ++r)
        for (int k = 0; k < 2; ++k)
          e[r][k] = (dy_valid >> (r * 2 + k)) & 1u ? LOAD(dy, dy_offset + (long)r * OW + k) : 0.0f;
      float a[4][2];  // A e: rows e0, e0 + e1, e0 - e1, -e1; then (A e) A^T
      for (int k = 0; k < 2; ++k) {
        a[0][k] = e[0][k];
        a[1][k] = e[0][k] + e[1][k];
        a[2][k] = e[0][k] - e[1][k];
        a[3][k] = -e[1][k];
      }
      __local float* e_out = Es + j * WINO_ROW + ch;
      for (int r = 0; r < 4; ++r) {
        e_out[(r * 4 + 0) * stride] = a[r][0];
        e_out[(r * 4 + 1) * stride] = a[r][0] + a[r][1];
        e_out[(r * 4 + 2) * stride] = a[r][0] - a[r][1];
        e_out[(r * 4 + 3) * stride] = -a[r][1];
      }
      float d[4][4], v[16];
      for (int r = 0; r < 4; ++r)
        for (int k = 0; k < 4; ++k)
          d[r][k] = (x_valid >> (r * 4 + k)) & 1u ? LOAD(x, x_offset + (long)r * W + k) : 0.0f;
      wino_input_transform(d, v);
      __local float* v_out = Vs + j * WINO_ROW + ch;
      for (int k = 0; k < 16; ++k) v_out[k * stride] = v[k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < WINO_GRAD_TILES; ++j) {
      __local const float* ep = Es + xi * stride + j * WINO_ROW + ob * 8;
      __local const float* vp = Vs + xi * stride + j * WINO_ROW + cb * 8;
      const float4 ea = vload4(0, ep), eb = vload4(1, ep), va = vload4(0, vp), vb = vload4(1, vp);
      const float u[8] = {ea.x, ea.y, ea.z, ea.w, eb.x, eb.y, eb.z, eb.w};
      const float v[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
      for (int a = 0; a < 8; ++a)
        for (int b = 0; b < 8; ++b) acc[a][b] = fma(u[a], v[b], acc[a][b]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  __global float* out = partial + partial_off + ((ulong)slice * 16 + xi) * OC * C;
  for (int a = 0; a < 8; ++a) {
    const uint o = oc0 + ob * 8 + a;
    if (o >= OC) break;
    for (int b = 0; b < 8; ++b) {
      const uint c = c0 + cb * 8 + b;
      if (c < C) out[(ulong)o * C + c] = acc[a][b];
    }
  }
}

// dw [OC, C, 3, 3] = G^T m G, m the sum over the slices of partial[slice][xi][o][c] in order.
// Work-group of 256: 16 elements (o, c) x the 16 xi, then 16 work-items transform back.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void winograd_weight_gradient(__global const float* partial, ulong partial_off, uint elements,
                              uint slices, __global float* dw, ulong dw_off) {
  __local float sums[16][17];
  const int lane = get_local_id(0) % 16, xi = get_local_id(0) / 16;
  const uint element = get_group_id(0) * 16 + lane;
  float sum = 0.0f;
  if (element < elements)
    for (uint g = 0; g < slices; ++g)
      sum += partial[partial_off + ((ulong)g * 16 + xi) * elements + element];
  sums[xi][lane] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (xi != 0 || element >= elements) return;
  float m[4][4];
  for (int k = 0; k < 16; ++k) m[k / 4][k % 4] = sums[k][lane];
  float q[3][4];  // G^T m
  for (int b = 0; b < 4; ++b) {
    q[0][b] = m[0][b] + 0.5f * (m[1][b] + m[2][b]);
    q[1][b] = 0.5f * (m[1][b] - m[2][b]);
    q[2][b] = 0.5f * (m[1][b] + m[2][b]) + m[3][b];
  }
  __global float* out = dw + dw_off + (ulong)element * 9;
  for (int a = 0; a < 3; ++a) {  // (G^T m) G
    out[a * 3 + 0] = q[a][0] + 0.5f * (q[a][1] + q[a][2]);
    out[a * 3 + 1] = 0.5f * (q[a][1] - q[a][2]);
    out[a * 3 + 2] = 0.5f * (q[a][1] + q[a][2]) + q[a][3];
  }
}
