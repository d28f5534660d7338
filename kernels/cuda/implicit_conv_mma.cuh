// The block-level tensor-core multiply of the implicit-GEMM convolution (for
// kernels/cuda/implicit_conv_kernels.cuh and halo_conv.cu): operand traits per math tag, cp.async
// copies, the ldmatrix and mma.sync primitives, and BlockMma, whose 8 warps multiply one pipeline
// step's tiles in shared memory, through WMMA, or for bf16 (and TF32 where asked) through ldmatrix
// and mma.sync (BlockMma::kRaw).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"

namespace trident::cuda::tile_mma {

namespace wmma = nvcuda::wmma;

// How a kernel multiplies, keyed by a math tag M: the storage type of its operands, the element
// the tensor cores read, the fragment's K and the row padding (16 bytes). Bf16 and F16 are both
// tags and storage; Tf32 is float32 storage rounded to TF32 as the fragments are loaded (float32
// convolutions with allow_tf32 only: see implicit_conv_fits).
struct Tf32 {};
template <typename M>
struct MmaTraits;
template <>
struct MmaTraits<Bf16> {
  using Storage = Bf16;
  using Element = __nv_bfloat16;
  using FragType = __nv_bfloat16;
  static constexpr int kK = 16, kPad = 8;
};
template <>
struct MmaTraits<F16> {
  using Storage = F16;
  using Element = __half;
  using FragType = __half;
  static constexpr int kK = 16, kPad = 8;
};
template <>
struct MmaTraits<Tf32> {
  using Storage = float;
  using Element = float;
  using FragType = wmma::precision::tf32;
  static constexpr int kK = 8, kPad = 4;
};
template <typename M>
using StorageOf = typename MmaTraits<M>::Storage;

template <typename M>
constexpr int kVec = 16 / int(sizeof(StorageOf<M>));  // elements per 16-byte cp.async copy
// K per pipeline step: 64 bytes of a row (32 16-bit or 16 float elements), so that a step's
// tiles take the same shared memory and copies in every type. In the gather kernel a step is
// part of one tap's channels (channels come in 32s); in the weight gradient, positions.
template <typename M>
constexpr int kStepK = 64 / int(sizeof(StorageOf<M>));

// 16 bytes from global to shared memory without passing through registers (sm_80); zeros when
// !valid (src is then not read but must be a valid address).
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  const unsigned address = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// Tensor-core primitives of BlockMma's raw path (sm_80): four 8x8 matrices of 16-bit elements
// from shared memory (lanes 8j..8j+7 give the row addresses of matrix j; .trans transposes each),
// and D += A B on a 16x8x16 bf16 tile with float accumulation. Fragment layouts: PTX ISA, "Matrix
// Fragments for mma.m16n8k16".
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const void* row, bool transpose) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  const unsigned address = unsigned(__cvta_generic_to_shared(row));
  if (transpose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const unsigned (&a)[4],
                                                 unsigned b0, unsigned b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The same for f16 operands (halo_conv.cu).
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const unsigned (&a)[4],
                                                unsigned b0, unsigned b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// D += A B on a 16x8x8 tile of TF32 operands (float32 bits rounded by to_tf32), float32
// accumulation.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const unsigned (&a)[4],
                                                unsigned b0, unsigned b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// A float32's bits rounded to TF32, to nearest (cvt.rna), as wmma::__float_to_tf32 does.
__device__ __forceinline__ unsigned to_tf32(unsigned bits) {
  return __float_as_uint(round_to_tf32(__uint_as_float(bits)));
}

// D += A B on a 16x8x16 tile of 16-bit operands S (Bf16 or F16), float32 accumulation.
template <typename S>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1) {
  if constexpr (std::is_same_v<S, Bf16>)
    mma_bf16_16x8x16(d, a, b0, b1);
  else
    mma_f16_16x8x16(d, a, b0, b1);
}

// One 8-warp block's accumulators and its multiply over one step's tiles in shared memory.
// A is [BM][kBK + pad] (row-major) or, kAColMajor, [kBK][BM + pad]; B is [kBK][kBN + pad]
// (row-major) or, kBColMajor, [kBN][kBK + pad].
template <typename M, int BM, int kBN, bool kAColMajor, bool kBColMajor, int kStages,
          bool kRawTf32 = false>
struct BlockMma {
  using T = MmaTraits<M>;
  using E = typename T::Element;
  static constexpr int kBK = kStepK<M>;
  static constexpr int kWarpsM = BM / 32, kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpN = kBN / kWarpsN, kFragsM = 2, kFragsN = kWarpN / 16;
  static_assert(kWarpsM * kWarpsN == 8 && kFragsN >= 1, "8 warps of 32 x 16k");
  static constexpr int kLda = kAColMajor ? BM + T::kPad : kBK + T::kPad;
  static constexpr int kLdb = kBColMajor ? kBK + T::kPad : kBN + T::kPad;
  static constexpr int kAElems = kAColMajor ? kBK * kLda : BM * kLda;
  static constexpr int kBElems = kBColMajor ? kBN * kLdb : kBK * kLdb;
  static constexpr int kLdc = kBN + 4;  // the float result tile [BM][kLdc]
  static_assert(kLda * sizeof(E) % 16 == 0 && kLdb * sizeof(E) % 16 == 0,
                "rows start on 16 bytes: the cp.async copies");
  using ALayout = std::conditional_t<kAColMajor, wmma::col_major, wmma::row_major>;
  using BLayout = std::conditional_t<kBColMajor, wmma::col_major, wmma::row_major>;

  // TF32 through mma.sync (kRawTf32): fragments by ldmatrix where they run along K in shared
  // memory (row-major A, column-major B: ldmatrix reads 32-bit elements as pairs of 16-bit ones
  // only untransposed), else by 32-bit loads, one an element.
  static constexpr bool kRawTf32Path = kRawTf32 && std::is_same_v<M, Tf32>;
  // Bf16 operands go through ldmatrix and mma.sync (kRaw): a warp's 16x16 piece of C is two
  // 16x8 tiles, acc[i][2j] and acc[i][2j + 1]. Through WMMA, the bf16 weight gradient took 69 us
  // where f16 took 48 (the ResNet's 28x28 32->32 layer, ncu, H200), and 53 this way; f16 took
  // 53 this way too, so F16 stays on WMMA. TF32 on WMMA ran at about 60 TFLOP/s (ncu, ResNet-9's
  // 32x32 and 16x16 layers, H200); this way (kRawTf32) that model's tf32 step went from 17.4 to
  // 12.2 ms.
  static constexpr bool kRaw = std::is_same_v<M, Bf16> || kRawTf32Path;
  struct WmmaAcc {
    wmma::fragment<wmma::accumulator, 16, 16, T::kK, float> f[kFragsM][kFragsN];
  };
  struct RawAcc {
    float f[kFragsM][2 * kFragsN][4];
  };
  std::conditional_t<kRaw, RawAcc, WmmaAcc> acc;
  int warp_m, warp_n;

  __device__ BlockMma() {
    const int warp = threadIdx.x / 32;
    warp_m = warp / kWarpsN;
    warp_n = warp % kWarpsN;
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        if constexpr (kRaw) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc.f[i][2 * j + e / 4][e % 4] = 0.f;
        } else {
          wmma::fill_fragment(acc.f[i][j], 0.0f);
        }
      }
  }

  using AFrag = wmma::fragment<wmma::matrix_a, 16, 16, T::kK, typename T::FragType, ALayout>;
  using BFrag = wmma::fragment<wmma::matrix_b, 16, 16, T::kK, typename T::FragType, BLayout>;

  // TF32 rounds to nearest (cvt.rna) what the tensor cores would otherwise truncate.
  template <class Frag>
  __device__ static void round_to_tf32(Frag& f) {
#pragma unroll
    for (int e = 0; e < f.num_elements; ++e) f.x[e] = wmma::__float_to_tf32(f.x[e]);
  }

  template <bool kHoist = false>
  __device__ void step(const E* a_tile, const E* b_tile) {
    if constexpr (kRawTf32Path)
      raw_tf32_step(a_tile, b_tile);
    else if constexpr (kRaw)
      raw_step<kHoist>(a_tile, b_tile);
    else
      wmma_step(a_tile, b_tile);
  }

  // The TF32 form of raw_step<true>: an 8-deep slice a product. mma.m16n8k8's tf32
  // fragments (lane l, g = l / 4, t = l % 4): a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4],
  // a3 = A[g + 8][t + 4]; b0 = B[t][g], b1 = B[t + 4][g]. A 16-byte ldmatrix row is 4 floats, so
  // the four 8x8 16-bit matrices of a row-major 16 x 8 piece of A are, lane by lane, a0..a3, and
  // those of a column-major B's [n][k] rows b0, b1 of two 8-column tiles.
  __device__ void raw_tf32_step(const E* a_tile, const E* b_tile) {
    const int lane = threadIdx.x % 32, matrix = lane / 8, r = lane % 8;
    const int g = lane / 4, t = lane % 4;
    auto bits = [](const E* p) { return __float_as_uint(*p); };
#pragma unroll
    for (int k = 0; k < kBK; k += T::kK) {
      unsigned a[kFragsM][4], b[kFragsN][4];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        const int m = warp_m * 32 + i * 16;
        if constexpr (kAColMajor) {  // A[m][k] at a_tile[k * kLda + m]
          const E* p = a_tile + (k + t) * kLda + m + g;
          a[i][0] = bits(p), a[i][1] = bits(p + 8);
          a[i][2] = bits(p + 4 * kLda), a[i][3] = bits(p + 4 * kLda + 8);
        } else {
          load_matrices(a[i], a_tile + (m + (matrix % 2) * 8 + r) * kLda + k + (matrix / 2) * 4,
                        false);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) a[i][e] = to_tf32(a[i][e]);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        const int n = warp_n * kWarpN + j * 16;
        if constexpr (kBColMajor) {
          load_matrices(b[j], b_tile + (n + (matrix / 2) * 8 + r) * kLdb + k + (matrix % 2) * 4,
                        false);
        } else {  // B[k][n] at b_tile[k * kLdb + n]: b[j][0..1] 8 columns, [2..3] the next 8
          const E* p = b_tile + (k + t) * kLdb + n + g;
          b[j][0] = bits(p), b[j][1] = bits(p + 4 * kLdb);
          b[j][2] = bits(p + 8), b[j][3] = bits(p + 4 * kLdb + 8);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) b[j][e] = to_tf32(b[j][e]);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j)
#pragma unroll
        for (int i = 0; i < kFragsM; ++i) {
          mma_tf32_16x8x8(acc.f[i][2 * j], a[i], b[j][0], b[j][1]);
          mma_tf32_16x8x8(acc.f[i][2 * j + 1], a[i], b[j][2], b[j][3]);
        }
    }
  }

  // Lane l gives the row address for matrix l / 8 (see load_matrices): A's four matrices are
  // (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) of a 16x16 piece; B's
  // are (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), so that b[0], b[1]
  // feed the first 16x8 tile and b[2], b[3] the second.
  // kHoist: every B fragment of a 16-deep slice is loaded before its products (the gather
  // kernel: ResNet-9's bf16 step 6.48 -> 6.31 ms with the taps change below, H200); else each
  // just before its own. The products are the same, in the same order.
  template <bool kHoist>
  __device__ void raw_step(const E* a_tile, const E* b_tile) {
    const int lane = threadIdx.x % 32, matrix = lane / 8, r = lane % 8;
#pragma unroll
    for (int k = 0; k < kBK; k += T::kK) {
      unsigned a[kFragsM][4], b[kFragsN][4];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        const int m = warp_m * 32 + i * 16 + (matrix % 2) * 8, kk = k + (matrix / 2) * 8;
        // Row-major A: the rows are m (+ r); column-major: the rows are k (+ r), transposed.
        const E* row = kAColMajor ? a_tile + (kk + r) * kLda + m : a_tile + (m + r) * kLda + kk;
        load_matrices(a[i], row, kAColMajor);
      }
      auto load_b = [&](int j) {
        const int n = warp_n * kWarpN + j * 16 + (matrix / 2) * 8, kk = k + (matrix % 2) * 8;
        const E* row = kBColMajor ? b_tile + (n + r) * kLdb + kk : b_tile + (kk + r) * kLdb + n;
        load_matrices(b[j], row, !kBColMajor);
      };
      if constexpr (kHoist) {
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) load_b(j);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        if constexpr (!kHoist) load_b(j);
#pragma unroll
        for (int i = 0; i < kFragsM; ++i) {
          mma_bf16_16x8x16(acc.f[i][2 * j], a[i], b[j][0], b[j][1]);
          mma_bf16_16x8x16(acc.f[i][2 * j + 1], a[i], b[j][2], b[j][3]);
        }
      }
    }
  }

  __device__ void wmma_step(const E* a_tile, const E* b_tile) {
#pragma unroll
    for (int k = 0; k < kBK; k += T::kK) {
      AFrag a[kFragsM];
      BFrag b[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        const int row = warp_m * 32 + i * 16;
        wmma::load_matrix_sync(a[i], a_tile + (kAColMajor ? k * kLda + row : row * kLda + k),
                               kLda);
        if constexpr (std::is_same_v<M, Tf32>) round_to_tf32(a[i]);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        const int col = warp_n * kWarpN + j * 16;
        wmma::load_matrix_sync(b[j], b_tile + (kBColMajor ? col * kLdb + k : k * kLdb + col),
                               kLdb);
        if constexpr (std::is_same_v<M, Tf32>) round_to_tf32(b[j]);
      }
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc.f[i][j], a[i], b[j], acc.f[i][j]);
    }
  }

  // C to c ([BM][kLdc] floats).
  __device__ void store(float* c) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        float* tile = c + (warp_m * 32 + i * 16) * kLdc + warp_n * kWarpN + j * 16;
        if constexpr (kRaw) {  // lane l holds rows l / 4 and l / 4 + 8, columns 2 (l % 4) + 0, 1
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float* d = acc.f[i][2 * j + h];
            float* at = tile + (lane / 4) * kLdc + h * 8 + (lane % 4) * 2;
            *reinterpret_cast<float2*>(at) = make_float2(d[0], d[1]);
            *reinterpret_cast<float2*>(at + 8 * kLdc) = make_float2(d[2], d[3]);
          }
        } else {
          wmma::store_matrix_sync(tile, acc.f[i][j], kLdc, wmma::mem_row_major);
        }
      }
  }

  // Shared memory: kStages stages of tiles, reused for the result tile (a kernel may put more
  // after kTileBytes).
  static constexpr int kStageBytes = (kAElems + kBElems) * int(sizeof(E));
  static constexpr int kTileBytes =
      (std::max(kStages * kStageBytes, BM * kLdc * 4) + 127) / 128 * 128;
  __device__ static E* a_stage(char* smem, int stage) {
    return reinterpret_cast<E*>(smem + stage * kStageBytes);
  }
  __device__ static E* b_stage(char* smem, int stage) { return a_stage(smem, stage) + kAElems; }
};

}  // namespace trident::cuda::tile_mma
