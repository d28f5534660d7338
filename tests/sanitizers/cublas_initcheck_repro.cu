// compute-sanitizer's initcheck does not see every cuBLAS kernel's stores: a standalone check.
// Build and run on a GPU machine (not part of the CMake build):
//   nvcc -O2 -lineinfo -arch=sm_90 tests/sanitizers/cublas_initcheck_repro.cu -lcublas -o repro
//   compute-sanitizer --tool initcheck ./repro        # C of the first shape reported unwritten
//   compute-sanitizer --tool initcheck ./repro mark   # C marked through NVTX, as Trident does
// H100, CUDA 13.0 / cuBLAS 13.1: the first shape (the ResNet stem's convolution) runs
// cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1, and initcheck reports all
// 802,816 elements of its C as uninitialised when the next kernel reads them, while the sentinel
// shows the GEMM wrote every one; the other shapes (nvjet sm90 kernels) are not reported.
// backends/cuda/cublas_gemm.cpp therefore marks every dense C a cuBLAS call writes (mark_written).
//
// Does compute-sanitizer's initcheck see the stores of cuBLAS's strided-batched bf16 GEMMs?
// For each ResNet conv shape at batch 32 (y_n[OC,P] = W[OC,CKK] col_n[CKK,P], as Trident's conv
// forward calls it): C is cudaMalloc'd and never written by us, the GEMM runs with beta = 0, then
// a kernel reads every element of C. A second C, pre-filled with 0xFFFF, proves the GEMM wrote
// every element (count of 0xFFFF left must be 0). If initcheck reports reads of the first C, its
// reports are about stores it cannot see, not about unwritten memory.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>
#include <cstdio>
#include <cstring>
#include <vector>
#define CK(x)                                                     \
  do {                                                            \
    auto e_ = (x);                                                \
    if (int(e_) != 0) {                                           \
      printf("error %d at %s:%d\n", int(e_), __FILE__, __LINE__); \
      return 1;                                                   \
    }                                                             \
  } while (0)
__global__ void count(const unsigned short* c, long n, unsigned long long* sentinel, float* sum) {
  long i = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  unsigned short v = c[i];
  if (v == 0xFFFF) atomicAdd(sentinel, 1ull);
  atomicAdd(sum, __bfloat162float(__ushort_as_bfloat16(v)));
}
__global__ void fill(unsigned short* p, long n, unsigned seed) {
  long i = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (i < n)
    p[i] = __bfloat16_as_ushort(
        __float2bfloat16(((i * 2654435761u + seed) % 1000) / 1000.0f - 0.5f));
}
int main(int argc, char** argv) {
  const bool mark = argc > 1 && !strcmp(argv[1], "mark");
  nvtxDomainHandle_t domain = nvtxDomainCreateA("repro");
  struct Shape {
    int oc, p, ckk;
  } shapes[] = {{32, 784, 9},   {32, 784, 288},  {64, 196, 288}, {64, 196, 576},
                {128, 49, 576}, {128, 49, 1152}, {64, 196, 32},  {128, 49, 64}};
  const int batch = 32;
  cublasHandle_t h;
  CK(cublasCreate(&h));
  for (auto s : shapes) {
    unsigned short *w, *col, *c, *c2;
    unsigned long long* sentinel;
    float* sum;
    long nw = long(s.oc) * s.ckk, ncol = long(batch) * s.ckk * s.p, nc = long(batch) * s.oc * s.p;
    CK(cudaMalloc(&w, nw * 2));
    CK(cudaMalloc(&col, ncol * 2));
    CK(cudaMalloc(&c, nc * 2));
    CK(cudaMalloc(&c2, nc * 2));
    CK(cudaMalloc(&sentinel, 8));
    CK(cudaMalloc(&sum, 4));
    CK(cudaMemset(sentinel, 0, 8));
    CK(cudaMemset(sum, 0, 4));
    CK(cudaMemset(c2, 0xFF, nc * 2));
    fill<<<(nw + 255) / 256, 256>>>(w, nw, 1);
    fill<<<(ncol + 255) / 256, 256>>>(col, ncol, 2);
    float alpha = 1, beta = 0;
    for (unsigned short* out : {c, c2})
      CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.p, s.oc, s.ckk, &alpha, col,
                                    CUDA_R_16BF, s.p, long(s.ckk) * s.p, w, CUDA_R_16BF, s.ckk, 0,
                                    &beta, out, CUDA_R_16BF, s.p, long(s.oc) * s.p, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (mark) {  // tell initcheck what the GEMM wrote
      nvtxMemVirtualRangeDesc_t range{size_t(nc * 2), c};
      nvtxMemMarkInitializedBatch_t desc{};
      desc.extCompatID = NVTX_EXT_COMPATID_MEM;
      desc.structSize = sizeof desc;
      desc.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
      desc.regionDescCount = 1;
      desc.regionDescElementSize = sizeof range;
      desc.regionDescElements = &range;
      nvtxMemCudaMarkInitialized(domain, 0, 0, &desc);
    }
    count<<<(nc + 255) / 256, 256>>>(c, nc, sentinel, sum);  // what initcheck may report
    unsigned long long zero_check;
    CK(cudaMemset(sentinel, 0, 8));
    count<<<(nc + 255) / 256, 256>>>(c2, nc, sentinel, sum);
    CK(cudaMemcpy(&zero_check, sentinel, 8, cudaMemcpyDeviceToHost));
    printf("shape OC %d P %d CKK %d batch %d: elements the GEMM left unwritten: %llu of %ld\n",
           s.oc, s.p, s.ckk, batch, zero_check, nc);
    cudaFree(w);
    cudaFree(col);
    cudaFree(c);
    cudaFree(c2);
    cudaFree(sentinel);
    cudaFree(sum);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
