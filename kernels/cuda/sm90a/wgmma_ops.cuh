// Hopper's warpgroup multiply, wgmma.mma_async (PTX ISA 8.0+, sm_90a only), for kernels/cuda/
// sm90a/: D[64 x N] (float, in registers) += A[64 x K] B[K x N], A and B read from shared memory
// through matrix descriptors. The four warps of a warpgroup issue it together; it runs
// asynchronously until wait(). D's layout (PTX ISA, "wgmma .m64nNk16 accumulator fragment"):
// warp w holds rows 16 w + lane / 4 (+ 8), and d[4 j + e] is column 8 j + 2 (lane % 4) + e % 2
// of the upper (e < 2) or lower row (store_accumulators).
#pragma once
#include <cstdint>

#include "trident/kernels/cuda/float_types.cuh"

namespace trident::cuda::wgmma {

template <typename S>
struct Tag {};

// A shared-memory matrix descriptor for a K-major tile in the 128-byte swizzle: rows of 64
// 16-bit elements (128 bytes), the 16-byte chunk c of row r stored at chunk c ^ (r % 8), groups
// of 8 rows 1024 bytes apart (the stride byte offset), tiles on 1024 bytes. The leading byte
// offset is unused in this layout (1 by convention). A K slice of 16 elements starts 32 bytes
// further: add 2 to the descriptor. The hardware takes the swizzle from the address bits, so a
// matrix may also start at any row of such a tile (address + 128 row, the base-offset field 0;
// setting it to (address >> 7) & 7 gave wrong products): checked on an H200 for shifts of 0-15
// rows. Commit 6ea083e's halo-window kernel read its taps so; it was slower than mma.sync's.
__device__ __forceinline__ uint64_t descriptor(uint32_t shared_address) {
  return uint64_t((shared_address & 0x3FFFF) >> 4) | uint64_t(1) << 16 |
         uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

// The same for an MN-major tile: groups of 8 K rows, each row 64 M (or N) elements (128 bytes) in
// the 128-byte swizzle (chunk c of K row k at c ^ (k % 8)), the groups 1024 bytes apart. Only for
// products one atom (64 elements) wide in M and N: both byte offsets are then 1024, whichever of
// them the hardware takes as the stride along K. A K slice of 16 rows starts 2048 bytes further:
// add 128 to the descriptor.
__device__ __forceinline__ uint64_t descriptor_mn_major(uint32_t shared_address) {
  return uint64_t((shared_address & 0x3FFFF) >> 4) | uint64_t(1024 >> 4) << 16 |
         uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

// Orders this thread's earlier accesses to the accumulators (and shared memory) before the
// next wgmma.mma_async.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Returns once at most kPending committed groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes shared memory written through the generic proxy (st.shared, cp.async) visible to the
// async proxy that wgmma reads it through; before the barrier that publishes the writes.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operands of the instructions below: "{%0, ..., %(N/2 - 1)}" and d[0, N/2) in
// place, for N = 128, 64 and 32 (the lists were written out by a script).
#define TRIDENT_WGMMA_D64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define TRIDENT_WGMMA_D64_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
  "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), \
  "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
  "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
  "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), \
  "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), \
  "+f"(d[62]), "+f"(d[63])
#define TRIDENT_WGMMA_D32 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TRIDENT_WGMMA_D32_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
  "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), \
  "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

#define TRIDENT_WGMMA_D16 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define TRIDENT_WGMMA_D16_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15])

// D[64 x 128] += A[64 x 16] B[16 x 128], 16-bit, both K-major. scale_d = 0 would ignore D's
// old values.
__device__ __forceinline__ void mma_m64n128k16(Tag<Bf16>, float (&d)[64], uint64_t desc_a,
                                               uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TRIDENT_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : TRIDENT_WGMMA_D64_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}
__device__ __forceinline__ void mma_m64n128k16(Tag<F16>, float (&d)[64], uint64_t desc_a,
                                               uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TRIDENT_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : TRIDENT_WGMMA_D64_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

// D[64 x 128] += A[64 x 8] B[8 x 128] in TF32, both K-major (the only layout TF32 takes): the
// tensor cores read each float32's TF32 bits and ignore the rest, so operands must come rounded.
__device__ __forceinline__ void mma_m64n128k8_tf32(float (&d)[64], uint64_t desc_a,
                                                   uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " TRIDENT_WGMMA_D64
      ", %64, %65, p, 1, 1;\n}\n"
      : TRIDENT_WGMMA_D64_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

// D[64 x 32] += A[64 x 16] B[16 x 32], 16-bit, both K-major (B: 32 rows of the same 128-byte
// swizzle, four groups of 8).
__device__ __forceinline__ void mma_m64n32k16(Tag<Bf16>, float (&d)[16], uint64_t desc_a,
                                              uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " TRIDENT_WGMMA_D16
      ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : TRIDENT_WGMMA_D16_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}
__device__ __forceinline__ void mma_m64n32k16(Tag<F16>, float (&d)[16], uint64_t desc_a,
                                              uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " TRIDENT_WGMMA_D16
      ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : TRIDENT_WGMMA_D16_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}
// D[64 x 32] += A[64 x 8] B[8 x 32] in TF32, both K-major.
__device__ __forceinline__ void mma_m64n32k8_tf32(float (&d)[16], uint64_t desc_a,
                                                  uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 " TRIDENT_WGMMA_D16
      ", %16, %17, p, 1, 1;\n}\n"
      : TRIDENT_WGMMA_D16_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

// D[64 x 64] += A[64 x 16] B[16 x 64], 16-bit, both MN-major (A stored with M contiguous, B with
// N contiguous: the transpose flags set), one 128-byte swizzle atom wide (descriptor_mn_major).
__device__ __forceinline__ void mma_m64n64k16_mn_major(Tag<Bf16>, float (&d)[32],
                                                       uint64_t desc_a, uint64_t desc_b,
                                                       int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TRIDENT_WGMMA_D32
      ", %32, %33, p, 1, 1, 1, 1;\n}\n"
      : TRIDENT_WGMMA_D32_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}
__device__ __forceinline__ void mma_m64n64k16_mn_major(Tag<F16>, float (&d)[32],
                                                       uint64_t desc_a, uint64_t desc_b,
                                                       int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TRIDENT_WGMMA_D32
      ", %32, %33, p, 1, 1, 1, 1;\n}\n"
      : TRIDENT_WGMMA_D32_OPERANDS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

#undef TRIDENT_WGMMA_D64
#undef TRIDENT_WGMMA_D64_OPERANDS
#undef TRIDENT_WGMMA_D32
#undef TRIDENT_WGMMA_D32_OPERANDS
#undef TRIDENT_WGMMA_D16
#undef TRIDENT_WGMMA_D16_OPERANDS

// This thread's accumulators d of a 64 x N product (N = 2 x the count) to c[row * ldc + column]
// (float, shared memory), c at the warpgroup's row 0 and the product's column 0: float2 stores,
// eight rows of a warp on distinct banks where ldc % 32 == 8.
template <int kCount>
__device__ __forceinline__ void store_accumulators(const float (&d)[kCount], float* c, int ldc) {
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  float* row = c + (warp * 16 + lane / 4) * ldc + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    *reinterpret_cast<float2*>(row + 8 * j) = make_float2(d[4 * j], d[4 * j + 1]);
    *reinterpret_cast<float2*>(row + 8 * ldc + 8 * j) = make_float2(d[4 * j + 2], d[4 * j + 3]);
  }
}

// The same accumulators transposed: element (row, column) of the product to c[column * ldc +
// row], c at the product's (row 0, column 0). The eight rows and four column pairs of a warp's
// store land on distinct banks where ldc % 32 == 4.
template <int kCount>
__device__ __forceinline__ void store_accumulators_transposed(const float (&d)[kCount], float* c,
                                                              int ldc) {
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  float* column = c + 2 * (lane % 4) * ldc + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    float* at = column + 8 * j * ldc;
    at[0] = d[4 * j];
    at[ldc] = d[4 * j + 1];
    at[8] = d[4 * j + 2];
    at[ldc + 8] = d[4 * j + 3];
  }
}

}  // namespace trident::cuda::wgmma
