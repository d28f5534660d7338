// GemmEngine: how an OpenCL device multiplies matrices. Trident's own tiled kernel (gemm.cl:
// small and medium products, bias and ReLU fused) or CLBlast plus an epilogue kernel (large
// products), split-K for under-filled products, and the scratch they need. The policy comes from
// the environment once, when the device is made (TRIDENT_OPENCL_OWN_GEMM, _SPLIT_K, _GEMM_TILE).
#pragma once
#include <CL/cl.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "trident/backends/opencl/cl_queue.h"
#include "trident/core/device.h"

namespace trident::opencl {

// When the own tiled kernel runs instead of CLBlast: TRIDENT_OPENCL_OWN_GEMM=auto (default: on
// GPUs, products up to 2^31 multiply-adds, where CLBlast's per-call host work and its extra
// pad/transpose/epilogue launches cost more than its faster large-matrix kernels gain), always,
// never, or a number (the largest m*n*k*batch it takes, on any device type).
enum class OwnGemmMode : int { auto_, always, never };

// The own kernel's float-arithmetic tile shapes (gemm_tiled.cpp's table; the tensor-core kernel
// comes after them): the index of the one named `name` ("32", "64", "128" or "32x128") or -1,
// and all the names, for messages.
constexpr int kGemmTileShapes = 4;
int gemm_tile_shape(const std::string& name);
std::string gemm_tile_shape_names();
struct GemmPolicy {
  OwnGemmMode mode = OwnGemmMode::auto_;
  double max_work = 0.0;        // auto: the largest m*n*k*batch for the own kernel
  bool explicit_limit = false;  // max_work came from the variable: any device type
  long split_k = 0;             // TRIDENT_OPENCL_SPLIT_K: 0 auto, else S slices (1: never)
  int tile = -1;                // TRIDENT_OPENCL_GEMM_TILE: -1 auto, else the forced tile shape
                                // (an index of gemm_tiled.cpp's table: 32, 64, 128 or 32x128)
  // Reads the variables; a value it does not understand is a UsageError naming it.
  static GemmPolicy from_env();
};

// One product on raw device memory, strides filled in: C[M,N] = alpha op(A) op(B) + beta C,
// + bias (bias_kind 1: per column bias[N], 2: per row bias[M]), then the activation. A and B are
// of ab_type, C of c_type (f32, f16 or bf16), the bias float32; 16-bit products always
// accumulate in float.
struct GemmCall {
  DType ab_type = DType::f32, c_type = DType::f32;
  bool trans_a = false, trans_b = false;
  size_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  DeviceMemory a, b, c;
  size_t lda = 0, ldb = 0, ldc = 0;
  DeviceMemory bias;
  int bias_kind = 0;
  UnaryOp activation = UnaryOp::identity;
  float activation_alpha = 0.0f;
};

// One call of the own GEMM kernel: `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i
// (+ bias, ReLU), op(A)[i, p] = A[i * a_rs + p * a_cs], op(B)[p, j] = B[p * b_rs + j * b_cs],
// operand i starting `*_batch` elements after operand i-1. Types as GemmCall's.
struct TiledGemm {
  DType ab_type = DType::f32, c_type = DType::f32;
  size_t m = 0, n = 0, k = 0, batch = 1;
  size_t k_last = size_t(-1);  // K of the last batch entry (a split-K tail); -1: k
  size_t c_plane = 0;          // > 0: C is a conv output [N, M, c_plane] (see gemm.cl)
  float alpha = 1.0f, beta = 0.0f;
  DeviceMemory a, b, c;
  size_t a_rs = 0, a_cs = 0, a_batch = 0, b_rs = 0, b_cs = 0, b_batch = 0, ldc = 0, c_batch = 0;
  DeviceMemory bias;
  int bias_kind = 0;  // 0 none, 1 per column, 2 per row
  bool relu = false;
  // The plain product's arguments as strides.
  static TiledGemm of(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                      DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                      DeviceMemory c, size_t ldc);
};

// NVIDIA's compute capability of an OpenCL device as 10 * major + minor (cl_nv_device_attribute_
// query), 0 for any other device.
int nvidia_compute_capability(cl_device_id device);
// Whether 16-bit GEMMs use tensor cores through inline PTX on this device: compute capability
// 8.0 or more, unless TRIDENT_OPENCL_TENSOR_CORES=0; =emulate (tests) runs the same kernel on
// any device with the tensor-core instruction emulated.
enum class TensorCores { off, ptx, emulated };
TensorCores opencl_tensor_cores(cl_device_id device);

class GemmEngine {
 public:
  GemmEngine(ClQueue& queue, const DeviceInfo& info);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  // The whole product with its epilogue: split-K where it pays, else the own kernel where the
  // policy and shape allow, else CLBlast and an epilogue kernel. 16-bit A and B run on the own
  // kernel only (CLBlast's half GEMM accumulates in half, and it has no bfloat16): false, with
  // nothing queued, when the policy or shape leaves such a product to CLBlast (the caller then
  // stages it through float32).
  bool gemm(const GemmCall& g);
  // Whether gemm() takes `t`'s 16-bit product (rather than returning false): the tensor-core
  // kernel, or the policy, runs it on the own kernel, and its indices fit that kernel. A split-K
  // slice fits wherever the whole product does.
  bool takes_16bit(const TiledGemm& t) const;
  // Whether tiled() runs `t` (any operand types) rather than returning false.
  bool takes(const TiledGemm& t) const;
  // C = alpha op(A) op(B) + beta C alone in float32, own kernel or CLBlast.
  void plain(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
             DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
             DeviceMemory c, size_t ldc);
  // `batch` products C_i = alpha op(A_i) op(B_i) (beta 0), X_i = X + i * x_stride elements;
  // the last one multiplies k_last terms (a split-K tail; k_last == k: all alike). C float32,
  // A and B of ab_type (16-bit: the own kernel only, which gemm() has checked takes them).
  void strided_batched(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                       DeviceMemory a, size_t lda, size_t a_stride, DeviceMemory b, size_t ldb,
                       size_t b_stride, DeviceMemory c, size_t ldc, size_t c_stride,
                       size_t batch, size_t k_last, DType ab_type = DType::f32);
  // Runs `t` on the own tiled kernel and returns true, or returns false (nothing queued) when
  // the policy (float32 operands only: for 16-bit ones gemm() has decided) or the shape leaves
  // it to CLBlast (gemm_tiled.cpp).
  bool tiled(const TiledGemm& t);

 private:
  // Whether the own kernel takes a product of `work` multiply-adds on this device (the policy;
  // shape limits aside).
  bool own_kernel_takes(double work) const;
  // The tile shape (0 .. kGemmTileShapes - 1, or kGemmTileShapes: the tensor-core kernel) the
  // own kernel would run `t` with, or
  // -1 when its indices or launch grid do not fit the kernel (the policy aside).
  int tile_variant(const TiledGemm& t) const;
  // Whether `t` (16-bit A and B) runs on the tensor-core kernel (builds it on first use).
  bool tensor_cores_for(const TiledGemm& t) const;
  // How many K slices split_k cuts this product into (1: none).
  size_t split_k_slices(const GemmCall& g) const;
  // The product as a split-K sum with its epilogue; false when the shape does not call for it.
  bool split_k(const GemmCall& g);
  void clblast(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
               DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
               DeviceMemory c, size_t ldc);
  // The tile program of shape `variant` for these operand types (built on first use).
  struct TileProgram {
    std::once_flag once;
    cl_program program = nullptr;
    cl_kernel kernel = nullptr;
  };
  TileProgram& tile_program(int variant, DType ab_type, DType c_type);

  ClQueue& queue_;
  const GemmPolicy policy_;
  const bool is_gpu_;
  const int compute_units_;

  // Per tile shape (and the tensor-core kernel) x A/B type x C type (f32, f16, bf16 each).
  TileProgram tile_programs_[kGemmTileShapes + 1][3][3];
  // 16-bit products on tensor cores (NVIDIA, compute capability 8.0+, not turned off by
  // TRIDENT_OPENCL_TENSOR_CORES=0); cleared if the driver refuses the program.
  mutable TensorCores tensor_cores_ = TensorCores::off;

  // CLBlast's scratch for padded GEMMs and the split-K partial products, grown to the largest
  // need and kept (no allocation once a step has run); one each per queue (main, side: the
  // index is ClQueue::on_side()), grown together.
  ClBuffer clblast_scratch_[2], split_k_scratch_[2];
  // CLBlast's scratch need per (transposes, sizes, offsets, strides): asked once each.
  std::map<std::tuple<int, int, size_t, size_t, size_t, size_t, size_t, size_t, size_t, size_t,
                      size_t>,
           size_t>
      clblast_scratch_sizes_;
};

}  // namespace trident::opencl
