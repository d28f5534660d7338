// CPU convolution: per sample, im2col then one sgemm whose output is already NCHW; samples are
// split into `slots` contiguous pieces that run in parallel, each with its own workspace slice.
//
// Forward:  y_n[OC, P] = w[OC, CKK] * col_n[CKK, P] + b        (P = OH*OW, CKK = C*KH*KW)
// Backward: dw += dy_n[OC, P] * col_n[CKK, P]^T               (the GEMM's packing transposes
//           col_n 8x8 in registers: 8% faster for the ResNet than writing the transposed patch
//           matrix element by element)
//           dcol[CKK, P] = w^T * dy_n, dx_n = col2im(dcol)
//           db[OC] = sum over n and P of dy, in double
#include "trident/kernels/cpu/conv2d.h"

#include <cstring>

#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/im2col.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// One slot's slice of the workspace: [col | dcol | dw partial | db partial (double)].
struct SlotLayout {
  int64_t ckk, p, oc;
  size_t col_bytes, dw_bytes, db_bytes;
  explicit SlotLayout(const Conv2dShape& s)
      : ckk(s.in_channels * s.kernel_h * s.kernel_w),
        p(s.out_height() * s.out_width()),
        oc(s.out_channels),
        col_bytes(round64(size_t(ckk * p) * sizeof(float))),
        dw_bytes(round64(size_t(oc * ckk) * sizeof(float))),
        db_bytes(round64(size_t(oc) * sizeof(double))) {}
  size_t slot_bytes() const { return 2 * col_bytes + dw_bytes + db_bytes; }
  char* slot(void* workspace, int t) const {
    return static_cast<char*>(workspace) + size_t(t) * slot_bytes();
  }
  float* col(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t)); }
  float* dcol(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t) + col_bytes); }
  float* dw(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + 2 * col_bytes);
  }
  double* db(void* ws, int t) const {
    return reinterpret_cast<double*>(slot(ws, t) + 2 * col_bytes + dw_bytes);
  }
};

// A 1x1 kernel with stride 1 and no padding: the patch matrix is the input itself.
bool pointwise(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0;
}

int pieces(const Conv2dShape& s, int slots) {
  return int(std::max<int64_t>(1, std::min<int64_t>(slots, s.batch)));
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dShape& s, int slots) {
  return size_t(std::max(slots, 1)) * SlotLayout(s).slot_bytes();
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y, void* workspace, int slots) {
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const GemmEpilogue bias{b, b ? BiasKind::per_row : BiasKind::none, false};
  parallel_pieces(pieces(s, slots), s.batch, [&](int t, int64_t n0, int64_t n1) {
    float* col = L.col(workspace, t);
    for (int64_t n = n0; n < n1; ++n) {
      const float* x_n = x + n * in_size;
      if (!pointwise(s)) im2col(s, x_n, col);
      sgemm(false, false, L.oc, L.p, L.ckk, 1.f, w, L.ckk, pointwise(s) ? x_n : col, L.p, 0.f,
            y + n * out_size, L.p, bias);
    }
  });
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db, void* workspace, int slots) {
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const int T = pieces(s, slots);
  if (s.batch == 0) {  // nothing to sum: the gradients are zero
    std::memset(dw, 0, size_t(L.oc * L.ckk) * sizeof(float));
    if (db) std::memset(db, 0, size_t(L.oc) * sizeof(float));
    return;
  }
  parallel_pieces(T, s.batch, [&](int t, int64_t n0, int64_t n1) {
    float* col = L.col(workspace, t);
    float* dcol = L.dcol(workspace, t);
    float* dw_part = t == 0 ? dw : L.dw(workspace, t);  // piece 0 writes dw directly
    double* db_part = L.db(workspace, t);
    std::fill(db_part, db_part + L.oc, 0.0);
    for (int64_t n = n0; n < n1; ++n) {
      const float* x_n = x + n * in_size;
      const float* dy_n = dy + n * out_size;
      if (!pointwise(s)) im2col(s, x_n, col);
      sgemm(false, true, L.oc, L.ckk, L.p, 1.f, dy_n, L.p, pointwise(s) ? x_n : col, L.p,
            n == n0 ? 0.f : 1.f, dw_part, L.ckk);
      if (db)
        for (int64_t o = 0; o < L.oc; ++o) db_part[o] += sum_floats(dy_n + o * L.p, L.p);
      if (!dx) continue;
      float* dx_n = dx + n * in_size;
      if (pointwise(s)) {
        sgemm(true, false, L.ckk, L.p, L.oc, 1.f, w, L.ckk, dy_n, L.p, 0.f, dx_n, L.p);
      } else {
        sgemm(true, false, L.ckk, L.p, L.oc, 1.f, w, L.ckk, dy_n, L.p, 0.f, dcol, L.p);
        col2im(s, dcol, dx_n);
      }
    }
  });
  // Fixed-order combination of the pieces' partials.
  const int64_t dw_size = L.oc * L.ckk;
  for (int t = 1; t < T; ++t) {
    const float* part = L.dw(workspace, t);
    for (int64_t i = 0; i < dw_size; ++i) dw[i] += part[i];
  }
  for (int64_t o = 0; db && o < L.oc; ++o) {
    double total = 0.0;
    for (int t = 0; t < T; ++t) total += L.db(workspace, t)[o];
    db[o] = float(total);
  }
}

}  // namespace trident::cpu
