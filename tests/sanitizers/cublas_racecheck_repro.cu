// compute-sanitizer's racecheck reported 5 shared-memory hazards in the fp16 ResNet conformance
// steps, all inside cuBLAS's nvjet_sm90_hsh_64x32_64x16_4x1_v_bz_NNT. Is that cuBLAS alone? This
// program calls nothing but cuBLAS, with the ResNet's convolution GEMMs as Trident issues them
// (backends/cuda/ops_conv2d.cpp: row-major operands through swapped column-major calls,
// strided-batched over the samples, fp16 A/B/C, float32 compute) at the test's batches (20 in
// training, 40 in evaluation), and its classifier (128 -> 10, plain GEMMs), each
// followed by a device synchronisation and a line naming the call, so that racecheck's reports
// fall between the lines of the call they belong to. Not part of the CMake build:
//   nvcc -O2 -lineinfo -arch=sm_90 tests/sanitizers/cublas_racecheck_repro.cu -lcublas -o repro
//   compute-sanitizer --tool racecheck --racecheck-report hazard ./repro [bf16]
// H100, CUDA 13.0 / cuBLAS 13.1, compute-sanitizer 2025.3.1 (2026-11-26): the 3x3 32->32
// convolution's forward at batch 40 (m 32, n 784, k 288) runs nvjet_sm90_hsh_64x32_64x16_1x1_h_badd_NNT
// (bf16: nvjet_sm90_tst_..._h_badd_NNT), and racecheck reports "Potential WAR hazard" errors
// inside it, a read at +0xac0 against a write at +0x2960, the same with --racecheck-memcpy-async
// yes or no; every other call here reports none. PyTorch 2.11's torch.matmul of the same shape
// (fp16, batch 40; W[32, 288] @ col[40, 288, 784]) runs nvjet_sm90_hsh_64x32_64x16_1x1_h_bz_NNT
// and gets the same reports at the same two offsets. The hazard is cuBLAS's kernel's, whoever
// calls it.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstring>
#define CK(x)                                                     \
  do {                                                            \
    auto e_ = (x);                                                \
    if (int(e_) != 0) {                                           \
      printf("error %d at %s:%d\n", int(e_), __FILE__, __LINE__); \
      return 1;                                                   \
    }                                                             \
  } while (0)
__global__ void fill(unsigned short* p, long n, unsigned seed, bool bf16) {
  long i = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = ((i * 2654435761u + seed) % 1000) / 1000.0f - 0.5f;
  p[i] = bf16 ? static_cast<unsigned short>(__float_as_uint(v) >> 16)
              : __half_as_ushort(__float2half(v));
}
int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && !strcmp(argv[1], "bf16");
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  // The ResNet's convolutions: out channels, output pixels, in channels x kernel area.
  struct Shape {
    const char* name;
    int oc, p, ckk;
  } shapes[] = {{"stem 3x3 1->32 @28", 32, 784, 9},       {"3x3 32->32 @28", 32, 784, 288},
                {"3x3 32->64 s2 @14", 64, 196, 288},      {"3x3 64->64 @14", 64, 196, 576},
                {"1x1 32->64 s2 @14", 64, 196, 32},       {"3x3 64->128 s2 @7", 128, 49, 576},
                {"3x3 128->128 @7", 128, 49, 1152},       {"1x1 64->128 s2 @7", 128, 49, 64}};
  cublasHandle_t h;
  CK(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  for (const int batch : {20, 40})
  for (const Shape& s : shapes) {
    unsigned short *w, *col, *y;
    const long nw = long(s.oc) * s.ckk, ncol = long(batch) * s.ckk * s.p,
               ny = long(batch) * s.oc * s.p;
    CK(cudaMalloc(&w, nw * 2));
    CK(cudaMalloc(&col, ncol * 2));
    CK(cudaMalloc(&y, ny * 2));
    fill<<<(nw + 255) / 256, 256>>>(w, nw, 1, bf16);
    fill<<<(ncol + 255) / 256, 256>>>(col, ncol, 2, bf16);
    fill<<<(ny + 255) / 256, 256>>>(y, ny, 3, bf16);
    CK(cudaDeviceSynchronize());
    // Forward: y_n[OC, P] += W[OC, CKK] col_n[CKK, P] (beta 1: y holds the bias).
    printf("== %s: forward (m %d, n %d, k %d, batch %d)\n", s.name, s.oc, s.p, s.ckk, batch);
    fflush(stdout);
    CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.p, s.oc, s.ckk, &one, col, t,
                                  s.p, long(s.ckk) * s.p, w, t, s.ckk, 0, &one, y, t, s.p,
                                  long(s.oc) * s.p, batch, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    // Input gradient: dcol_n[CKK, P] = W[OC, CKK]^T dy_n[OC, P] (into col).
    printf("== %s: input gradient (m %d, n %d, k %d, batch %d)\n", s.name, s.ckk, s.p, s.oc,
           batch);
    fflush(stdout);
    CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.p, s.ckk, s.oc, &one, y, t,
                                  s.p, long(s.oc) * s.p, w, t, s.ckk, 0, &zero, col, t, s.p,
                                  long(s.ckk) * s.p, batch, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(w));
    CK(cudaFree(col));
    CK(cudaFree(y));
  }
  // The classifier y[B, 10] = x[B, 128] W[10, 128]^T, dW[10, 128] = dy^T x, dx[B, 128] = dy W.
  for (const int batch : {20, 40}) {
    unsigned short *x, *w, *y;
    CK(cudaMalloc(&x, batch * 128 * 2));
    CK(cudaMalloc(&w, 10 * 128 * 2));
    CK(cudaMalloc(&y, batch * 10 * 2));
    fill<<<(batch * 128 + 255) / 256, 256>>>(x, batch * 128, 4, bf16);
    fill<<<5, 256>>>(w, 1280, 5, bf16);
    fill<<<1, 256>>>(y, batch * 10, 6, bf16);
    printf("== linear 128->10, batch %d: forward\n", batch);
    fflush(stdout);
    CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 10, batch, 128, &one, w, t, 128, x, t, 128,
                    &zero, y, t, 10, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    printf("== linear 128->10, batch %d: weight gradient\n", batch);
    fflush(stdout);
    CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 128, 10, batch, &one, x, t, 128, y, t, 10,
                    &zero, w, t, 128, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    printf("== linear 128->10, batch %d: input gradient\n", batch);
    fflush(stdout);
    CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 128, batch, 10, &one, w, t, 128, y, t, 10,
                    &zero, x, t, 128, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
  }
  printf("done\n");
  return 0;
}
