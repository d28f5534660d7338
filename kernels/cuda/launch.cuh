// Launch-shape helpers shared by the .cu files: grid-stride loops over int64 element counts.
#pragma once
#include <cstdint>

namespace trident::cuda {

constexpr int kBlockThreads = 256;
// Enough blocks to fill any current GPU many times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = 16384;

inline unsigned grid_for(int64_t items, int threads = kBlockThreads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Grid-stride loops: for (int64_t i = first_index(); i < n; i += grid_step()) { ... }
__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace trident::cuda
