// CPU convolution: im2col then one GEMM whose output is NCHW, for a group of g samples at a time
// (their patch matrices side by side, so that the small planes of deep layers still make wide
// GEMMs); samples are split into `slots` contiguous pieces that run in parallel, each with its
// own workspace slice. With G = g*P columns (P = OH*OW, CKK = C*KH*KW):
//
// Forward:  Y[OC, G] = w[OC, CKK] * col[CKK, G] + b; y_n = Y's columns of sample n (g = 1: the
//           GEMM writes y_n in place)
// Backward: dw += dY[OC, G] * col[CKK, G]^T                (the GEMM's packing transposes col;
//           dY gathers the group's dy_n, or is dy_n itself when g = 1)
//           dcol[CKK, G] = w^T * dY, dx_n = col2im(sample n's columns of dcol)
//           db[OC] = sum over n and P of dy, in double
// One template serves float32 (sgemm) and bfloat16 (gemm_bf16: bfloat16 patch matrices, float
// products and sums; dcol, dw and db in float, and dx summed in float and rounded once).
// Float32 3x3 stride-1 layers with 16 channels or more over 100 positions or more run their
// forward and gradients by Winograd's minimal filtering instead (winograd.h; where the data
// gradient's convolution does not fit, the whole backward stays as above).
#include "trident/kernels/cpu/conv2d.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "trident/kernels/cpu/convert.h"
#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/gemm_bf16.h"
#include "trident/kernels/cpu/im2col.h"
#include "trident/kernels/cpu/parallel.h"
#include "trident/kernels/cpu/winograd.h"

namespace trident::cpu {
namespace {

size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Columns a GEMM should have at least: below this the 12 x 32 (bf16) or 12 x 16 / 32 (float)
// micro-kernels' edges and the per-call packing of w dominate (a 7x7 plane is 49 columns).
constexpr int64_t kMinGemmColumns = 256;

// A 1x1 kernel with stride 1 and no padding: the patch matrix is the input itself.
bool pointwise(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0;
}

// Samples per GEMM for this shape: enough planes for kMinGemmColumns (1 for 1x1 stride-1
// convolutions, whose patch matrix is the input itself).
int64_t group_size(const Conv2dShape& s) {
  if (pointwise(s)) return 1;
  const int64_t p = std::max<int64_t>(1, s.out_height() * s.out_width());
  return std::clamp<int64_t>((kMinGemmColumns + p - 1) / p, 1, std::max<int64_t>(s.batch, 1));
}

// One slot's slice of the workspace: [col | dcol | dw partial | db partial (double) | dx rows |
// Y]. col (g samples, the element type) and dcol (float) are [CKK, g*P]; dx rows (float, one
// sample's C*H*W, bfloat16 only) gather col2im's sums before they are rounded to bfloat16; Y
// (the element type, [OC, g*P], only when g > 1) holds a group's output or its gathered dy.
struct SlotLayout {
  int64_t ckk, p, oc, g;
  size_t col_bytes, dcol_bytes, dw_bytes, db_bytes, dx_bytes, y_bytes;
  explicit SlotLayout(const Conv2dShape& s)
      : ckk(s.in_channels * s.kernel_h * s.kernel_w),
        p(s.out_height() * s.out_width()),
        oc(s.out_channels),
        g(group_size(s)),
        col_bytes(round64(size_t(ckk * p * g) * element_bytes(s))),
        dcol_bytes(round64(size_t(ckk * p * g) * sizeof(float))),
        dw_bytes(round64(size_t(oc * ckk) * sizeof(float))),
        db_bytes(round64(size_t(oc) * sizeof(double))),
        dx_bytes(s.dtype == DType::bf16
                     ? round64(size_t(s.in_channels * s.height * s.width) * sizeof(float))
                     : 0),
        y_bytes(g > 1 ? round64(size_t(oc * p * g) * element_bytes(s)) : 0) {}
  static size_t element_bytes(const Conv2dShape& s) { return s.dtype == DType::bf16 ? 2 : 4; }
  size_t slot_bytes() const {
    return col_bytes + dcol_bytes + dw_bytes + db_bytes + dx_bytes + y_bytes;
  }
  char* slot(void* workspace, int t) const {
    return static_cast<char*>(workspace) + size_t(t) * slot_bytes();
  }
  template <class T>
  T* col(void* ws, int t) const {
    return reinterpret_cast<T*>(slot(ws, t));
  }
  float* dcol(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t) + col_bytes); }
  float* dw(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + col_bytes + dcol_bytes);
  }
  double* db(void* ws, int t) const {
    return reinterpret_cast<double*>(slot(ws, t) + col_bytes + dcol_bytes + dw_bytes);
  }
  float* dx_rows(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + col_bytes + dcol_bytes + dw_bytes + db_bytes);
  }
  template <class T>
  T* y(void* ws, int t) const {
    return reinterpret_cast<T*>(slot(ws, t) + col_bytes + dcol_bytes + dw_bytes + db_bytes +
                                dx_bytes);
  }
};

// Copies the [rows, width] blocks of `count` samples (sample i at from + i * sample_stride)
// between NCHW tensors and a [rows, count * width] matrix, in either direction.
template <class T>
void samples_to_matrix(const T* from, int64_t sample_stride, int64_t count, int64_t rows,
                       int64_t width, T* matrix) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(matrix + (r * count + i) * width, from + i * sample_stride + r * width,
                  size_t(width) * sizeof(T));
}
template <class T>
void matrix_to_samples(const T* matrix, int64_t count, int64_t rows, int64_t width, T* to,
                       int64_t sample_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(to + i * sample_stride + r * width, matrix + (r * count + i) * width,
                  size_t(width) * sizeof(T));
}

int pieces(const Conv2dShape& s, int slots) {
  return int(std::max<int64_t>(1, std::min<int64_t>(slots, s.batch)));
}

// C = op(A) * op(B) + beta * C (alpha 1) in float32, or from bfloat16 operands into a float32
// or bfloat16 C.
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc, epilogue);
}
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
             const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, false, ldc, epilogue);
}
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
             const uint16_t* B, int64_t ldb, float beta, uint16_t* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, true, ldc, epilogue);
}

template <class T>
void forward(const Conv2dShape& s, const T* x, const T* w, const float* b, T* y,
             void* workspace, int slots) {
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_fits(s)) return winograd_forward(s, x, w, b, y, workspace, slots);
  }
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const GemmEpilogue bias{b, b ? BiasKind::per_row : BiasKind::none, false};
  parallel_pieces(pieces(s, slots), s.batch, [&](int t, int64_t n0, int64_t n1) {
    T* col = L.col<T>(workspace, t);
    for (int64_t n = n0; n < n1; n += L.g) {
      const int64_t count = std::min(L.g, n1 - n), columns = count * L.p;
      const T* x_n = x + n * in_size;
      if (pointwise(s)) {  // count is 1
        product(false, false, L.oc, L.p, L.ckk, w, L.ckk, x_n, L.p, 0.f, y + n * out_size, L.p,
                bias);
        continue;
      }
      for (int64_t i = 0; i < count; ++i) im2col(s, x_n + i * in_size, col + i * L.p, columns);
      T* out = count == 1 ? y + n * out_size : L.y<T>(workspace, t);
      product(false, false, L.oc, columns, L.ckk, w, L.ckk, col, columns, 0.f, out, columns,
              bias);
      if (count > 1) matrix_to_samples(out, count, L.oc, L.p, y + n * out_size, out_size);
    }
  });
}

template <class T>
void backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* dx, float* dw,
              float* db, void* workspace, int slots) {
  // Winograd where it fits: the weight gradient, then the data gradient in the same
  // workspace, without patch matrices.
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_fits(s) && (!dx || winograd_input_gradient_fits(s))) {
      winograd_weight_gradient(s, x, dy, dw, db, workspace, slots);
      if (dx) winograd_input_gradient(s, w, dy, dx, workspace, slots);
      return;
    }
  }
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const int T_pieces = pieces(s, slots);
  if (s.batch == 0) {  // nothing to sum: the gradients are zero
    std::memset(dw, 0, size_t(L.oc * L.ckk) * sizeof(float));
    if (db) std::memset(db, 0, size_t(L.oc) * sizeof(float));
    return;
  }
  parallel_pieces(T_pieces, s.batch, [&](int t, int64_t n0, int64_t n1) {
    T* col = L.col<T>(workspace, t);
    float* dcol = L.dcol(workspace, t);
    float* dw_part = t == 0 ? dw : L.dw(workspace, t);  // piece 0 writes dw directly
    double* db_part = L.db(workspace, t);
    std::fill(db_part, db_part + L.oc, 0.0);
    for (int64_t n = n0; n < n1; n += L.g) {
      const int64_t count = std::min(L.g, n1 - n), columns = count * L.p;
      const T* x_n = x + n * in_size;
      const T* dy_n = dy + n * out_size;
      if (db)
        for (int64_t i = 0; i < count; ++i)
          for (int64_t o = 0; o < L.oc; ++o)
            db_part[o] += sum_values(dy_n + i * out_size + o * L.p, L.p);
      const T* patches = x_n;  // pointwise: the input is its own patch matrix (count is 1)
      if (!pointwise(s)) {
        for (int64_t i = 0; i < count; ++i) im2col(s, x_n + i * in_size, col + i * L.p, columns);
        patches = col;
      }
      const T* dY = dy_n;
      if (count > 1) {
        T* gathered = L.y<T>(workspace, t);
        samples_to_matrix(dy_n, out_size, count, L.oc, L.p, gathered);
        dY = gathered;
      }
      product(false, true, L.oc, L.ckk, columns, dY, columns, patches, columns,
              n == n0 ? 0.f : 1.f, dw_part, L.ckk);
      if (!dx) continue;
      T* dx_n = dx + n * in_size;
      if (pointwise(s)) {
        product(true, false, L.ckk, L.p, L.oc, w, L.ckk, dy_n, L.p, 0.f, dx_n, L.p);
        continue;
      }
      product(true, false, L.ckk, columns, L.oc, w, L.ckk, dY, columns, 0.f, dcol, columns);
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          col2im(s, dcol + i * L.p, dx_n + i * in_size, columns);
        } else {
          float* rows = L.dx_rows(workspace, t);
          col2im(s, dcol + i * L.p, rows, columns);
          convert(rows, DType::f32, dx_n + i * in_size, DType::bf16, in_size);
        }
      }
    }
  });
  // Fixed-order combination of the pieces' partials.
  const int64_t dw_size = L.oc * L.ckk;
  for (int t = 1; t < T_pieces; ++t) {
    const float* part = L.dw(workspace, t);
    for (int64_t i = 0; i < dw_size; ++i) dw[i] += part[i];
  }
  for (int64_t o = 0; db && o < L.oc; ++o) {
    double total = 0.0;
    for (int t = 0; t < T_pieces; ++t) total += L.db(workspace, t)[o];
    db[o] = float(total);
  }
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dShape& s, int slots) {
  return std::max(size_t(std::max(slots, 1)) * SlotLayout(s).slot_bytes(),
                  winograd_workspace_bytes(s, slots));
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y, void* workspace, int slots) {
  forward(s, x, w, b, y, workspace, slots);
}

void conv2d_forward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w, const float* b,
                    uint16_t* y, void* workspace, int slots) {
  forward(s, x, w, b, y, workspace, slots);
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db, void* workspace, int slots) {
  backward(s, x, w, dy, dx, dw, db, workspace, slots);
}

void conv2d_backward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w,
                     const uint16_t* dy, uint16_t* dx, float* dw, float* db, void* workspace,
                     int slots) {
  backward(s, x, w, dy, dx, dw, db, workspace, slots);
}

}  // namespace trident::cpu
