// Which GEMM layout suits the ResNet's convolutions on a GPU? Times, with cuBLAS alone, the three
// GEMMs of each convolution at batch 256 in two layouts:
//   batched: one GEMM per sample (strided-batched), NCHW in place, as backends/cuda/ops_conv2d.cpp
//            issues them: y_n[OC,P] = W col_n; dcol_n = W^T dy_n; dw_n = dy_n col_n^T (then a sum)
//   folded:  the samples' columns side by side, one GEMM: t[OC, N*P] = W colw[CKK, N*P];
//            dcolw = W^T dyt; dw = dyt colw^T (K = N*P), at the price of a transpose of y / dy
// in fp32 (CUBLAS_COMPUTE_32F) and bf16 (bf16 operands, float32 accumulation; dw in float32).
// Not part of the CMake build:
//   nvcc -O2 -arch=sm_90 bench/cuda_conv_gemm_layouts.cu -lcublas -o conv_layouts && ./conv_layouts
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <functional>
#define CK(x)                                                     \
  do {                                                            \
    auto e_ = (x);                                                \
    if (int(e_) != 0) {                                           \
      printf("error %d at %s:%d\n", int(e_), __FILE__, __LINE__); \
      exit(1);                                                    \
    }                                                             \
  } while (0)

float time_ms(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int reps = 20;
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

int main() {
  struct Shape {
    const char* name;
    int oc, p, ckk;
  } shapes[] = {{"stem 1->32 @28", 32, 784, 9},     {"32->32 @28", 32, 784, 288},
                {"32->64 s2 @14", 64, 196, 288},    {"64->64 @14", 64, 196, 576},
                {"1x1 32->64 s2 @14", 64, 196, 32}, {"64->128 s2 @7", 128, 49, 576},
                {"128->128 @7", 128, 49, 1152},     {"1x1 64->128 s2 @7", 128, 49, 64}};
  const int counts[] = {1, 2, 1, 1, 1, 1, 1, 1};  // convolutions of each shape in the ResNet
  const long batch = 256;
  cublasHandle_t h;
  CK(cublasCreate(&h));
  void *col, *w, *y, *dw;
  CK(cudaMalloc(&col, 1L << 30));
  CK(cudaMalloc(&w, 64L << 20));
  CK(cudaMalloc(&y, 512L << 20));
  CK(cudaMalloc(&dw, 512L << 20));
  CK(cudaMemset(col, 0, 1L << 30));
  CK(cudaMemset(w, 0, 64L << 20));
  CK(cudaMemset(y, 0, 512L << 20));
  const float one = 1.f, zero = 0.f;
  for (const bool bf16 : {false, true}) {
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType_t tw = CUDA_R_32F;
    const long el = bf16 ? 2 : 4;
    double total[2] = {0, 0};
    printf("%s: ms per GEMM at batch %ld (batched / folded), and the transpose bytes folded adds\n",
           bf16 ? "bf16" : "fp32", batch);
    for (int i = 0; i < 8; ++i) {
      const auto& s = shapes[i];
      const long rows = s.ckk + 1, np = batch * s.p;
      const long ldw = (rows + 7) / 8 * 8;  // dw's rows padded to 8 floats (odd ones: align1)
      // batched
      const float fb = time_ms([&] {
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.p, s.oc, s.ckk, &one, col, t,
                                      s.p, rows * s.p, w, t, s.ckk, 0, &zero, y, t, s.p,
                                      long(s.oc) * s.p, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      });
      const float xb = time_ms([&] {
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.p, s.ckk, s.oc, &one, y, t,
                                      s.p, long(s.oc) * s.p, w, t, s.ckk, 0, &zero, col, t, s.p,
                                      rows * s.p, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      });
      const float wb = time_ms([&] {
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, s.oc, s.p, &one, col, t,
                                      s.p, rows * s.p, y, t, s.p, long(s.oc) * s.p, &zero, dw, tw,
                                      ldw, long(s.oc) * ldw, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      });
      // batched, the weight gradient transposed: dw_n^T[rows, OC] = col_n dy_n^T
      const float wt = time_ms([&] {
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.oc, rows, s.p, &one, y, t,
                                      s.p, long(s.oc) * s.p, col, t, s.p, rows * s.p, &zero, dw,
                                      tw, s.oc, long(s.oc) * rows, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      });
      // the same over the folded columns (col[rows, n*P]: ld N*P, sample stride P)
      const float wtf = time_ms([&] {
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.oc, rows, s.p, &one, y, t,
                                      s.p, long(s.oc) * s.p, col, t, np, s.p, &zero, dw, tw, s.oc,
                                      long(s.oc) * rows, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      });
      printf("  %-20s dw transposed (batched): %.4f, over folded columns %.4f\n", "", wt, wtf);
      // folded
      const float ff = time_ms([&] {
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, np, s.oc, s.ckk, &one, col, t, np, w, t,
                        s.ckk, &zero, y, t, np, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      const float xf = time_ms([&] {
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, np, s.ckk, s.oc, &one, y, t, np, w, t,
                        s.ckk, &zero, col, t, np, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      const float wf = time_ms([&] {
        CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, s.oc, np, &one, col, t, np, y, t, np,
                        &zero, dw, tw, ldw, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      // dw over groups of g samples folded (K = g*P), strided-batched over the groups.
      float wg[4];
      const int groups[4] = {4, 8, 16, 32};
      for (int j = 0; j < 4; ++j) {
        const long g = groups[j], kg = g * s.p;
        wg[j] = time_ms([&] {
          CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, s.oc, kg, &one, col, t,
                                        np, kg, y, t, np, kg, &zero, dw, tw, ldw,
                                        long(s.oc) * ldw, batch / g, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
        });
      }
      printf("  %-20s dw in groups of 4/8/16/32 samples: %.4f %.4f %.4f %.4f\n", "", wg[0], wg[1],
             wg[2], wg[3]);
      // Per step the folded layout adds two transposes of y (forward out, backward in).
      const double extra_mb = 2.0 * 2 * batch * s.oc * s.p * el / 1e6;
      printf("  %-20s fwd %.4f / %.4f  dx %.4f / %.4f  dw %.4f / %.4f  (+%.1f MB moved)\n",
             s.name, fb, ff, xb, xf, wb, wf, extra_mb);
      total[0] += counts[i] * (fb + xb + wb);
      total[1] += counts[i] * (ff + xf + wf);
    }
    printf("  ResNet convolution GEMMs per step: batched %.3f ms, folded %.3f ms\n", total[0],
           total[1]);
  }
  return 0;
}
