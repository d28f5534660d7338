// The elementwise driver of the CUDA kernels: one grid-stride loop over a flat buffer that hands
// an Op V consecutive elements at a time (16-byte packs: 8 halves or 4 floats a thread) where
// every pointer is aligned for it, and single elements for the unaligned case and the tail.
//
// An Op is a functor with `template <int V> __device__ void at(int64_t i) const` that handles
// elements [i, i + V) (a Pack when V > 1, see float_types.cuh).
#pragma once
#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {

template <int V, class Op>
__global__ void map_kernel(Op op, int64_t n, bool packed) {
  wait_for_prior_grids();
  int64_t begin = 0;
  if (packed) {
    const int64_t packs = n / V;
    for (int64_t p = first_index<int64_t>(); p < packs; p += grid_step<int64_t>())
      op.template at<V>(p * V);
    begin = packs * V;
  }
  for (int64_t i = begin + first_index<int64_t>(); i < n; i += grid_step<int64_t>())
    op.template at<1>(i);
}

// Runs op over n elements; packed: the caller checked that every pointer op touches is aligned
// for V-element packs.
template <int V, class Op>
void launch_map(const KernelContext& ctx, const Op& op, int64_t n, bool packed) {
  if (n <= 0) return;
  launch(ctx, map_kernel<V, Op>, grid_for(packed ? (n + V - 1) / V : n), kBlockThreads, 0, op, n,
         packed);
}

}  // namespace trident::cuda
