// Winograd F(2x2, 3x3) and F(3x3, 2x2) on the CPU (see winograd.h): the transforms run a tile
// row at a time over the planes' even and odd columns, so that their loops are plain array
// arithmetic the compiler vectorises; the 16 products per group of samples go to sgemm.
#include "trident/kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>

#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

constexpr int64_t kMinChannels = 16;
// Output positions a sample at least: at 7x7, 16 tiles hold 64 outputs for 49, and the direct
// product's K (C * 9 = 1152 in the ResNet) keeps its GEMM efficient. ResNet CPU step on the
// 2-core VM against im2col + GEMM (457-461 ms): 416-420 with the 28x28 and 14x14 layers here,
// 429-435 with the 28x28 ones alone, 431-446 with the 7x7 ones too.
constexpr int64_t kMinPositions = 100;
constexpr int64_t kGroupColumns = 192;  // tiles a group of samples gathers for its products

size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Sizes of one convolution c as the tiles see it, and its workspace: U, then per slot V, M,
// scratch (an input plane's even and odd columns with its padding, 2 (2 TH + 2) (TW + 1)
// floats, and a tile row's row transform, 8 (TW + 1); dy's split plane and transform and the
// output transform's 10 TW floats need less), and the weight gradient's partial sums.
struct Plan {
  int64_t C, OC, H, W, OH, OW, ph, pw;
  int64_t TH, TW, tiles;  // tiles of a sample: TH x TW blocks of 2x2 outputs
  int64_t group, columns;  // samples a group, and its tile columns (group * tiles)
  size_t u_bytes, v_bytes, m_bytes, scratch_bytes, mw_bytes, db_bytes;

  explicit Plan(const Conv2dShape& c)
      : C(c.in_channels), OC(c.out_channels), H(c.height), W(c.width), OH(c.out_height()),
        OW(c.out_width()), ph(c.pad_h), pw(c.pad_w), TH((OH + 1) / 2), TW((OW + 1) / 2),
        tiles(TH * TW),
        group(std::clamp<int64_t>((kGroupColumns + tiles - 1) / std::max<int64_t>(tiles, 1), 1,
                                  std::max<int64_t>(c.batch, 1))),
        columns(group * tiles),
        u_bytes(round64(size_t(16 * OC * C) * sizeof(float))),
        v_bytes(round64(size_t(16 * C * columns) * sizeof(float))),
        m_bytes(round64(size_t(16 * OC * columns) * sizeof(float))),
        scratch_bytes(round64(size_t((2 * (2 * TH + 2) + 8) * (TW + 1)) * sizeof(float))),
        mw_bytes(round64(size_t(16 * OC * C) * sizeof(float))),
        db_bytes(round64(size_t(OC) * sizeof(double))) {}
  size_t slot_bytes() const { return v_bytes + m_bytes + scratch_bytes + mw_bytes + db_bytes; }
  size_t bytes(int slots) const { return u_bytes + size_t(std::max(slots, 1)) * slot_bytes(); }
  float* u(void* ws) const { return static_cast<float*>(ws); }
  char* slot(void* ws, int t) const {
    return static_cast<char*>(ws) + u_bytes + size_t(t) * slot_bytes();
  }
  float* v(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t)); }
  float* m(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t) + v_bytes); }
  float* scratch(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + v_bytes + m_bytes);
  }
  // The weight gradient's: a slot's sums of the 16 products, and of dy's channels.
  float* mw(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + v_bytes + m_bytes + scratch_bytes);
  }
  double* db(void* ws, int t) const {
    return reinterpret_cast<double*>(slot(ws, t) + v_bytes + m_bytes + scratch_bytes + mw_bytes);
  }
};

bool tiles_fit(const Conv2dShape& c) {
  return c.dtype == DType::f32 && c.kernel_h == 3 && c.kernel_w == 3 && c.stride_h == 1 &&
         c.stride_w == 1 && c.pad_h >= 0 && c.pad_h <= 2 && c.pad_w >= 0 && c.pad_w <= 2 &&
         c.in_channels >= kMinChannels && c.out_channels >= kMinChannels &&
         c.out_height() * c.out_width() >= kMinPositions;
}

// U[xi][o][i] = (G g G^T)[xi] for the kernel g of output channel o and input channel i;
// kernel(o, i) returns its 9 values (row-major), or reads them flipped.
template <class Kernel>
void transform_weights(int64_t OC, int64_t C, const Kernel& kernel, float* U) {
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t i = 0; i < C; ++i) {
      float g[9];
      kernel(o, i, g);
      float q[4][3];  // G g
      for (int b = 0; b < 3; ++b) {
        q[0][b] = g[b];
        q[1][b] = 0.5f * (g[b] + g[3 + b] + g[6 + b]);
        q[2][b] = 0.5f * (g[b] - g[3 + b] + g[6 + b]);
        q[3][b] = g[6 + b];
      }
      for (int a = 0; a < 4; ++a) {  // (G g) G^T
        const float u[4] = {q[a][0], 0.5f * (q[a][0] + q[a][1] + q[a][2]),
                            0.5f * (q[a][0] - q[a][1] + q[a][2]), q[a][2]};
        for (int b = 0; b < 4; ++b) U[((a * 4 + b) * OC + o) * C + i] = u[b];
      }
    }
}

// B^T's rows over n elements: t0 = p0 - p2, t1 = p1 + p2, t2 = p2 - p1, t3 = p1 - p3. Separate
// restrict pointers, so that the loop vectorises.
inline void input_rows(const float* __restrict p0, const float* __restrict p1,
                       const float* __restrict p2, const float* __restrict p3,
                       float* __restrict t0, float* __restrict t1, float* __restrict t2,
                       float* __restrict t3, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    t0[j] = p0[j] - p2[j];
    t1[j] = p1[j] + p2[j];
    t2[j] = p2[j] - p1[j];
    t3[j] = p1[j] - p3[j];
  }
}

// A^T's rows over n elements: a = p0 + p1 + p2, b = p1 - p2 - p3.
inline void output_rows(const float* __restrict p0, const float* __restrict p1,
                        const float* __restrict p2, const float* __restrict p3,
                        float* __restrict a, float* __restrict b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    a[j] = p0[j] + p1[j] + p2[j];
    b[j] = p1[j] - p2[j] - p3[j];
  }
}

// out[2j] = left[j] + bias, out[2j + 1] = right[j] + bias for j < n.
inline void interleave(const float* __restrict left, const float* __restrict right, float bias,
                       float* __restrict out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    out[2 * j] = left[j] + bias;
    out[2 * j + 1] = right[j] + bias;
  }
}

// A's rows (4x2, the weight gradient's transform of dy) over n elements: t0 = p0, t1 = p0 + p1,
// t2 = p0 - p1, t3 = -p1.
inline void gradient_rows(const float* __restrict p0, const float* __restrict p1,
                          float* __restrict t0, float* __restrict t1, float* __restrict t2,
                          float* __restrict t3, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    t0[j] = p0[j];
    t1[j] = p0[j] + p1[j];
    t2[j] = p0[j] - p1[j];
    t3[j] = -p1[j];
  }
}

// A padded input row split into its even and odd columns (half each), straight from the
// image's row src (null: a padding row): column u holds src[u - pw], zero outside [0, W).
inline void split_row(const float* __restrict src, int64_t W, int64_t pw, int64_t half,
                      float* __restrict even, float* __restrict odd) {
  for (int parity = 0; parity < 2; ++parity) {
    float* __restrict dst = parity ? odd : even;
    if (!src) {
      std::fill(dst, dst + half, 0.f);
      continue;
    }
    // j with pw <= 2j + parity < pw + W (pw - parity >= -1: no negative division)
    const int64_t lo = std::min(half, (pw - parity + 1) / 2);
    const int64_t hi = std::clamp<int64_t>((pw + W - parity + 1) / 2, lo, half);
    const float* __restrict from = src + parity - pw;
    std::fill(dst, dst + lo, 0.f);
    for (int64_t j = lo; j < hi; ++j) dst[j] = from[2 * j];
    std::fill(dst + hi, dst + half, 0.f);
  }
}

// V's columns [first, first + tiles) for input channel ch of one sample: B^T d B of each tile.
// The channel's plane with its zero padding (2 TH + 2 rows of 2 TW + 2) is split into its even
// and odd columns (TW + 1 each), so that tile tj's columns 2tj .. 2tj + 3 are even[tj],
// odd[tj], even[tj + 1], odd[tj + 1]: per tile row, the row transform runs over each half, and
// the column transform is input_rows over shifted halves. (Copying each padded row before
// splitting it right after stalled the loads on the copy's stores: a quarter of the
// transform's time. Splitting straight from the image's rows, or copying the whole plane
// first, both avoid that, equally fast.)
void transform_input_plane(const Plan& P, const float* plane, int64_t ch, int64_t first,
                           float* scratch, float* V) {
  const int64_t half = P.TW + 1, rows = 2 * P.TH + 2;
  float* even = scratch;  // [rows][half]
  float* odd = even + rows * half;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ih = r - P.ph;
    const float* src = ih >= 0 && ih < P.H ? plane + ih * P.W : nullptr;
    split_row(src, P.W, P.pw, half, even + r * half, odd + r * half);
  }
  float* t_even = odd + rows * half;  // B^T d of one tile row: 4 rows of each half
  float* t_odd = t_even + 4 * half;
  for (int64_t ti = 0; ti < P.TH; ++ti) {
    const float* e = even + 2 * ti * half;
    const float* o = odd + 2 * ti * half;
    input_rows(e, e + half, e + 2 * half, e + 3 * half, t_even, t_even + half, t_even + 2 * half,
               t_even + 3 * half, half);
    input_rows(o, o + half, o + 2 * half, o + 3 * half, t_odd, t_odd + half, t_odd + 2 * half,
               t_odd + 3 * half, half);
    for (int k = 0; k < 4; ++k) {  // (B^T d) B: columns even[tj], odd[tj], even[tj+1], odd[tj+1]
      const float* te = t_even + k * half;
      const float* to = t_odd + k * half;
      auto v = [&](int l) { return V + ((k * 4 + l) * P.C + ch) * P.columns + first + ti * P.TW; };
      input_rows(te, to, te + 1, to + 1, v(0), v(1), v(2), v(3), P.TW);
    }
  }
}

// The 2x2 outputs of tile row ti of output channel o, A^T m A + bias, from M's columns
// [first, first + TW), cut at the image's edge. scratch: 10 TW floats.
void transform_output_row(const Plan& P, const float* M, int64_t o, int64_t ti, int64_t first,
                          float bias, float* scratch, float* out_plane) {
  const int64_t n = P.TW;
  auto m = [&](int xi) { return M + (xi * P.OC + o) * P.columns + first; };
  float* s0[4];  // A^T m: rows 0 + 1 + 2 and 1 - 2 - 3, each of 4 columns
  float* s1[4];
  for (int l = 0; l < 4; ++l) {
    s0[l] = scratch + l * n;
    s1[l] = scratch + (4 + l) * n;
    output_rows(m(l), m(4 + l), m(8 + l), m(12 + l), s0[l], s1[l], n);
  }
  float* left = scratch + 8 * n;  // (A^T m) A: an output row's even and odd columns
  float* right = scratch + 9 * n;
  const int64_t full = P.OW / 2;  // tiles whose two columns are both inside
  for (int r = 0; r < 2 && 2 * ti + r < P.OH; ++r) {
    float* const* s = r == 0 ? s0 : s1;
    output_rows(s[0], s[1], s[2], s[3], left, right, n);
    float* out = out_plane + (2 * ti + r) * P.OW;
    interleave(left, right, bias, out, full);
    if (full < n) out[2 * full] = left[full] + bias;
  }
}

// E's columns [first, first + tiles) for output channel o of one sample: A e A^T for each
// tile's 2x2 block e of dy (zero past the image's edge), split into even and odd columns as the
// input planes are.
void transform_gradient_plane(const Plan& P, const float* dy_plane, int64_t o, int64_t first,
                              float* scratch, float* E) {
  const int64_t rows = 2 * P.TH, n = P.TW;
  float* left = scratch;  // [rows][TW]: each block's left and right column, zero past the edge
  float* right = left + rows * n;
  for (int64_t r = 0; r < rows; ++r)
    split_row(r < P.OH ? dy_plane + r * P.OW : nullptr, P.OW, 0, n, left + r * n,
              right + r * n);
  float* tl = right + rows * n;  // A e of one tile row: 4 rows of each column
  float* tr = tl + 4 * n;
  for (int64_t ti = 0; ti < P.TH; ++ti) {
    const float* l = left + 2 * ti * n;
    const float* r = right + 2 * ti * n;
    gradient_rows(l, l + n, tl, tl + n, tl + 2 * n, tl + 3 * n, n);
    gradient_rows(r, r + n, tr, tr + n, tr + 2 * n, tr + 3 * n, n);
    for (int k = 0; k < 4; ++k) {  // (A e) A^T
      auto e = [&](int l4) { return E + ((k * 4 + l4) * P.OC + o) * P.columns + first + ti * n; };
      gradient_rows(tl + k * n, tr + k * n, e(0), e(1), e(2), e(3), n);
    }
  }
}

// dw[o, i] (3x3) = G^T m G for the 4x4 sums m = Mw[.][o][i] of the 16 products.
void weights_from_transform(int64_t OC, int64_t C, const float* Mw, float* dw) {
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t i = 0; i < C; ++i) {
      float m[4][4];
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) m[a][b] = Mw[((a * 4 + b) * OC + o) * C + i];
      float q[3][4];  // G^T m
      for (int b = 0; b < 4; ++b) {
        q[0][b] = m[0][b] + 0.5f * (m[1][b] + m[2][b]);
        q[1][b] = 0.5f * (m[1][b] - m[2][b]);
        q[2][b] = 0.5f * (m[1][b] + m[2][b]) + m[3][b];
      }
      float* out = dw + (o * C + i) * 9;
      for (int a = 0; a < 3; ++a) {  // (G^T m) G
        out[a * 3 + 0] = q[a][0] + 0.5f * (q[a][1] + q[a][2]);
        out[a * 3 + 1] = 0.5f * (q[a][1] - q[a][2]);
        out[a * 3 + 2] = 0.5f * (q[a][1] + q[a][2]) + q[a][3];
      }
    }
}

// The convolution c over x (N samples), with U already transformed: per group, V, the 16
// products, and the outputs.
void run_tiles(const Conv2dShape& c, const float* x, const float* b, float* y, void* workspace,
               int slots) {
  const Plan P(c);
  const int64_t in_size = P.C * P.H * P.W, out_size = P.OC * P.OH * P.OW;
  const int parts = int(std::max<int64_t>(1, std::min<int64_t>(slots, c.batch)));
  const float* U = P.u(workspace);
  parallel_pieces(parts, c.batch, [&](int t, int64_t n0, int64_t n1) {
    float* V = P.v(workspace, t);
    float* M = P.m(workspace, t);
    float* scratch = P.scratch(workspace, t);
    for (int64_t n = n0; n < n1; n += P.group) {
      const int64_t count = std::min(P.group, n1 - n), used = count * P.tiles;
      for (int64_t i = 0; i < count; ++i)
        for (int64_t ch = 0; ch < P.C; ++ch)
          transform_input_plane(P, x + (n + i) * in_size + ch * P.H * P.W, ch, i * P.tiles,
                                scratch, V);
      for (int xi = 0; xi < 16; ++xi)
        sgemm(false, false, P.OC, used, P.C, 1.f, U + xi * P.OC * P.C, P.C,
              V + xi * P.C * P.columns, P.columns, 0.f, M + xi * P.OC * P.columns, P.columns);
      for (int64_t i = 0; i < count; ++i)
        for (int64_t o = 0; o < P.OC; ++o)
          for (int64_t ti = 0; ti < P.TH; ++ti)
            transform_output_row(P, M, o, ti, i * P.tiles + ti * P.TW, b ? b[o] : 0.f,
                                 scratch, y + (n + i) * out_size + o * P.OH * P.OW);
    }
  });
}

}  // namespace

bool winograd_fits(const Conv2dShape& s) { return tiles_fit(s); }

bool winograd_input_gradient_fits(const Conv2dShape& s) {
  return tiles_fit(s) && tiles_fit(input_gradient_shape(s)) &&
         4 * s.height * s.width <= 5 * s.out_height() * s.out_width();
}

size_t winograd_workspace_bytes(const Conv2dShape& s, int slots) {
  size_t bytes = 0;
  if (winograd_fits(s)) bytes = Plan(s).bytes(slots);
  if (winograd_input_gradient_fits(s))
    bytes = std::max(bytes, Plan(input_gradient_shape(s)).bytes(slots));
  return bytes;
}

void winograd_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                      float* y, void* workspace, int slots) {
  if (s.batch == 0) return;
  const int64_t C = s.in_channels;
  transform_weights(s.out_channels, C,
                    [&](int64_t o, int64_t i, float* g) {
                      std::memcpy(g, w + (o * C + i) * 9, 9 * sizeof(float));
                    },
                    Plan(s).u(workspace));
  run_tiles(s, x, b, y, workspace, slots);
}

void winograd_input_gradient(const Conv2dShape& s, const float* w, const float* dy, float* dx,
                             void* workspace, int slots) {
  if (s.batch == 0) return;
  const Conv2dShape g = input_gradient_shape(s);
  const int64_t C = s.in_channels;
  // The gradient's output channel o is s's input channel, its input channel i s's output
  // channel; its kernel is w[i, o] turned by 180 degrees.
  transform_weights(g.out_channels, g.in_channels,
                    [&](int64_t o, int64_t i, float* k) {
                      const float* src = w + (i * C + o) * 9;
                      for (int e = 0; e < 9; ++e) k[e] = src[8 - e];
                    },
                    Plan(g).u(workspace));
  run_tiles(g, dy, nullptr, dx, workspace, slots);
}

void winograd_weight_gradient(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                              float* db, void* workspace, int slots) {
  const Plan P(s);
  if (s.batch == 0) {  // nothing to sum: the gradients are zero
    std::fill(dw, dw + P.OC * P.C * 9, 0.f);
    if (db) std::fill(db, db + P.OC, 0.f);
    return;
  }
  const int64_t in_size = P.C * P.H * P.W, plane = P.OH * P.OW, out_size = P.OC * plane;
  const int parts = int(std::max<int64_t>(1, std::min<int64_t>(slots, s.batch)));
  parallel_pieces(parts, s.batch, [&](int t, int64_t n0, int64_t n1) {
    float* V = P.v(workspace, t);
    float* E = P.m(workspace, t);
    float* scratch = P.scratch(workspace, t);
    float* Mw = P.mw(workspace, t);
    double* db_part = P.db(workspace, t);
    std::fill(db_part, db_part + P.OC, 0.0);
    for (int64_t n = n0; n < n1; n += P.group) {
      const int64_t count = std::min(P.group, n1 - n), used = count * P.tiles;
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t ch = 0; ch < P.C; ++ch)
          transform_input_plane(P, x + (n + i) * in_size + ch * P.H * P.W, ch, i * P.tiles,
                                scratch, V);
        for (int64_t o = 0; o < P.OC; ++o) {
          const float* dy_plane = dy + (n + i) * out_size + o * plane;
          transform_gradient_plane(P, dy_plane, o, i * P.tiles, scratch, E);
          if (db) db_part[o] += sum_values(dy_plane, plane);
        }
      }
      for (int xi = 0; xi < 16; ++xi)  // Mw[xi] (+)= E[xi] V[xi]^T, K = the group's tiles
        sgemm(false, true, P.OC, P.C, used, 1.f, E + xi * P.OC * P.columns, P.columns,
              V + xi * P.C * P.columns, P.columns, n == n0 ? 0.f : 1.f, Mw + xi * P.OC * P.C,
              P.C);
    }
  });
  // The pieces' sums in a fixed order, then G^T m G.
  float* total = P.mw(workspace, 0);
  const int64_t words = 16 * P.OC * P.C;
  for (int t = 1; t < parts; ++t) {
    const float* part = P.mw(workspace, t);
    for (int64_t k = 0; k < words; ++k) total[k] += part[k];
  }
  weights_from_transform(P.OC, P.C, total, dw);
  for (int64_t o = 0; db && o < P.OC; ++o) {
    double sum = 0.0;
    for (int t = 0; t < parts; ++t) sum += P.db(workspace, t)[o];
    db[o] = float(sum);
  }
}

}  // namespace trident::cpu
