// The CPU backend's bfloat16 GEMM on AMX tiles (TDPBF16PS) or AVX-512 BF16 (VDPBF16PS: pairs of
// bfloat16 products summed into float lanes), used where the CPU has them (chosen at run time);
// elsewhere the device front stages 16-bit GEMMs through float32 and sgemm.
#pragma once
#include <cstdint>

#include "trident/kernels/cpu/gemm.h"

namespace trident::cpu {

// Whether this CPU (and build) runs gemm_bf16: AVX-512 F/BW/VL/DQ and BF16, and the OS saves the
// zmm state; TRIDENT_CPU_BF16_DOT=0 turns it off (the staged float32 path then runs).
bool cpu_has_avx512_bf16();

// Whether gemm_bf16 runs on AMX tiles (TDPBF16PS): cpu_has_avx512_bf16(), the CPU has AMX-TILE
// and AMX-BF16, and Linux granted this process tile data; TRIDENT_CPU_AMX=0 turns it off.
bool cpu_has_amx_bf16();

// Which micro-kernel gemm_bf16 uses: the best this CPU has (AMX, else AVX-512 BF16), or one of
// them by name (tests compare both; only ask for AMX where cpu_has_amx_bf16()).
enum class Bf16Kernel { best, avx512, amx };

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C, then the epilogue (gemm.h's sgemm
// contract), with A and B bfloat16 bit patterns and float32 accumulation. C is float32, or
// bfloat16 when c_bf16 (rounded to nearest even, as core/half.h). Each product is exact in float
// and the float sums follow the instruction's order (VDPBF16PS: two products per step; AMX: its
// own), so results differ from the staged float32 path by float rounding only. Only call it where cpu_has_avx512_bf16().
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
               void* C, bool c_bf16, int64_t ldc, const GemmEpilogue& epilogue = {},
               Bf16Kernel kernel = Bf16Kernel::best);

}  // namespace trident::cpu
