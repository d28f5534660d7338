// The thread- and block-level steps of the per-channel reduction engine (channel_reduce.cuh,
// whose top comment says what an Op provides): where a channel's values lie (ChannelWalk), a
// thread's loads and adds in a fixed order (accumulate, accumulate_packs), the fixed-order merges
// of a warp, a block, a column block and the partials of several blocks (warp_merge,
// block_merge, column_merge, merge_parts, finish_from_partials), and the second pass over a
// thread's values (apply_units).
#pragma once
#include <algorithm>
#include <type_traits>
#include <utility>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {

// Value j (< length = outer * inner) of channel c.
template <typename I>
struct ChannelWalk {
  I channels = 1, inner = 1, length = 0;
  Divider<I> by_inner;
  bool one_run = false;  // outer == 1 or channels == 1: channel c is [c * length, (c+1) * length)
  __device__ __forceinline__ I address(I c, I j) const {
    if (one_run) return c * length + j;
    const I o = by_inner.div(j);
    return (o * channels + c) * inner + (j - o * inner);
  }
};

template <class Op>
constexpr int coef_slots() { return Op::kCoefWords > 0 ? Op::kCoefWords : 1; }

constexpr int kLoadBatch = 8;

// Group adds (optional): an Op with `template <int V> void add_group(Local&, const Value (&)[V])
// const` adds each batch of loaded values (a pack, or kLoadBatch values step apart) as one group,
// e.g. batch-norm statistics summing the group's shifted values as a tree (log2 V dependent adds
// instead of V).
template <class Op, class = void>
struct adds_groups : std::false_type {};
template <class Op>
struct adds_groups<Op, std::void_t<decltype(std::declval<const Op&>().template add_group<1>(
                           std::declval<typename Op::Local&>(),
                           std::declval<const typename Op::Value (&)[1]>()))>>
    : std::true_type {};

template <int V, class Op>
__device__ __forceinline__ void add_values(const Op& op, typename Op::Local& local,
                                           const typename Op::Value (&v)[V]) {
  if constexpr (adds_groups<Op>::value) {
    op.template add_group<V>(local, v);
  } else {
#pragma unroll
    for (int u = 0; u < V; ++u) op.add(local, v[u]);
  }
}

// A thread's values first, first + step, ... (< end) added in that order to zero() (the Op's
// Local for the channel: zero may load, e.g. a shift or the channel's parameters), with up to
// kLoadBatch loads in flight. The first batch is loaded before zero() is called, so that the
// loads of both are in flight together (zero's round trip used to come before the first batch's).
// address(j): where value j is.
template <typename I, class Op, class Zero, class Address>
__device__ __forceinline__ typename Op::Local accumulate(const Op& op, const Zero& zero, I first,
                                                         I end, I step, const Address& address) {
  const I span = I(kLoadBatch - 1) * step;
  I j = first;
  if (end <= span || j >= end - span) {
    typename Op::Local local = zero();
    for (; j < end; j += step) op.add(local, op.load(address(j)));
    return local;
  }
  typename Op::Value v[kLoadBatch];
#pragma unroll
  for (int u = 0; u < kLoadBatch; ++u) v[u] = op.load(address(j + I(u) * step));
  typename Op::Local local = zero();
  add_values<kLoadBatch>(op, local, v);
  for (j += I(kLoadBatch) * step; j < end - span; j += I(kLoadBatch) * step) {
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) v[u] = op.load(address(j + I(u) * step));
    add_values<kLoadBatch>(op, local, v);
  }
  for (; j < end; j += step) op.add(local, op.load(address(j)));
  return local;
}

// Merges the accumulators of a warp's lanes in a fixed tree (lane l takes lane l + offset's,
// so lower lanes come first); lane 0 gets the total. All-zero words must be merge's identity.
template <class Op>
__device__ __forceinline__ void warp_merge(double* acc) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    double other[Op::kWords];
#pragma unroll
    for (int k = 0; k < Op::kWords; ++k) other[k] = __shfl_down_sync(0xffffffffu, acc[k], offset);
    if (lane < offset) Op::merge(acc, other);
  }
}

// Merges the accumulators of a 1-D block (whole warps) in a fixed order: each warp's tree, then
// warp 0 merges the warps' totals the same way; thread 0 gets the total. Two barriers, where a
// shared-memory tree over the threads took nine (ncu, the ResNet's 7x7 batch-norm statistics on
// an H200: 11% of the stalls sat at that tree's barriers). shared: kWords * 32 doubles.
template <class Op>
__device__ __forceinline__ void block_merge(double* acc, double* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  warp_merge<Op>(acc);
  if (warps == 1) return;
  if (lane == 0)
    for (int k = 0; k < Op::kWords; ++k) shared[k * 32 + warp] = acc[k];
  __syncthreads();
  if (warp == 0) {
    for (int k = 0; k < Op::kWords; ++k) acc[k] = lane < warps ? shared[k * 32 + lane] : 0.0;
    warp_merge<Op>(acc);
  }
  __syncthreads();  // shared is free again
}

constexpr int kColumnChannels = 32, kColumnLanes = 8;

// The same over the row lanes (threadIdx.y) of each column (threadIdx.x) of a column block.
template <class Op>
__device__ __forceinline__ void column_merge(double* acc, double* shared) {
  const int x = threadIdx.x, y = threadIdx.y;
  auto at = [&](int k, int lane) { return (k * kColumnLanes + lane) * kColumnChannels + x; };
  for (int k = 0; k < Op::kWords; ++k) shared[at(k, y)] = acc[k];
  __syncthreads();
  for (int half = kColumnLanes / 2; half > 0; half /= 2) {
    if (y < half) {
      double a[Op::kWords], b[Op::kWords];
      for (int k = 0; k < Op::kWords; ++k) a[k] = shared[at(k, y)], b[k] = shared[at(k, y + half)];
      Op::merge(a, b);
      for (int k = 0; k < Op::kWords; ++k) shared[at(k, y)] = a[k];
    }
    __syncthreads();
  }
  for (int k = 0; k < Op::kWords; ++k) acc[k] = shared[at(k, 0)];
  __syncthreads();
}

// Parts [first, first + count * step) of channel c, step apart, merged in part order into acc
// (count >= 1). The loads are issued in groups before their merges, so that their L2 round trips
// overlap instead of following one another. At most 16 doubles in flight: inlined into the
// reduction kernels (80 registers for three blocks an SM), 8 parts of 3 or 4 words made the
// compiler spill in the main loop too (batch-norm statistics: 232 and 576 bytes, 325,000 local
// requests in one of ResNet-9's; 8 and 24 bytes with groups of 4).
template <typename I, class Op>
__device__ __forceinline__ void merge_parts(const double* p, I first, I count, I step,
                                            double* acc) {
  constexpr int kGroup = Op::kWords <= 2 ? 8 : 16 / Op::kWords;
  for (int k = 0; k < Op::kWords; ++k) acc[k] = __ldcg(p + int64_t(first) * Op::kWords + k);
  for (I i = 1; i < count; i += kGroup) {
    double next[kGroup][Op::kWords];
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      if (i + g < count)
        for (int k = 0; k < Op::kWords; ++k)
          next[g][k] = __ldcg(p + int64_t(first + (i + g) * step) * Op::kWords + k);
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      if (i + g < count) Op::merge(acc, next[g]);
  }
}

// Run by every thread of the block that arrived last: the parts of channels [first, first +
// channels) merged in a fixed order, finished, and their coefficients left in the scratch for
// channel_apply_kernel; then the arrival counter is reset. With few channels of many parts (a
// global norm: one channel of millions of values in thousands of parts) the block merges one
// channel at a time: thread t takes parts t, t + T, ... in order and a fixed tree joins the
// threads; otherwise each thread merges its channels' parts alone.
// shared: kWords * (threads of the block) doubles.
template <typename I, class Op>
__device__ void finish_from_partials(const Op& op, I first, I channels, I parts,
                                     const ReduceScratch& scratch, unsigned int* counter,
                                     double* shared) {
  __threadfence();  // pairs with the writers' fences: their partials are visible
  const int threads = blockDim.x * blockDim.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  auto finish = [&](I c, const double* acc) {
    float coef[coef_slots<Op>()];
    op.finish(c, acc, coef);
    for (int k = 0; k < Op::kCoefWords; ++k)
      scratch.coefficients[int64_t(c) * Op::kCoefWords + k] = coef[k];
  };
  // The block takes a channel at a time when that beats each thread merging its channel alone:
  // a channel costs the block one round of loads and a tree of barriers, a thread alone about
  // parts / 8 rounds of loads (merge_parts' groups).
  if (channels < I(threads) && parts >= I(16) * channels) {
    for (I c = first; c < first + channels; ++c) {
      const double* p = scratch.partials + int64_t(c) * parts * Op::kWords;
      double acc[Op::kWords];
      const bool has = I(tid) < parts;
      if (has) merge_parts<I, Op>(p, I(tid), (parts - I(tid) + I(threads) - 1) / I(threads),
                                  I(threads), acc);
      for (int k = 0; k < Op::kWords; ++k) shared[k * threads + tid] = has ? acc[k] : 0.0;
      __syncthreads();
      // Tree over the threads that hold a value: thread t takes t + half while it exists.
      const int holders = int(parts < I(threads) ? parts : I(threads));
      int width = 1;
      while (width < holders) width *= 2;
      for (int half = width / 2; half > 0; half /= 2) {
        if (tid < half && tid + half < holders) {
          double a[Op::kWords], b[Op::kWords];
          for (int k = 0; k < Op::kWords; ++k)
            a[k] = shared[k * threads + tid], b[k] = shared[k * threads + tid + half];
          Op::merge(a, b);
          for (int k = 0; k < Op::kWords; ++k) shared[k * threads + tid] = a[k];
        }
        __syncthreads();
      }
      if (tid == 0) {
        for (int k = 0; k < Op::kWords; ++k) acc[k] = shared[k * threads];
        finish(c, acc);
      }
      __syncthreads();  // shared is free for the next channel
    }
  } else {
    for (I c = first + I(tid); c < first + channels; c += I(threads)) {
      double acc[Op::kWords];
      merge_parts<I, Op>(scratch.partials + int64_t(c) * parts * Op::kWords, I(0), parts, I(1),
                         acc);
      finish(c, acc);
    }
  }
  if (tid == 0) *counter = 0u;  // every block has arrived: ready for the next kernel
}

template <class Op, class = void>
struct has_packed_loads : std::false_type {};
template <class Op>
struct has_packed_loads<Op, std::void_t<decltype(Op::kPackElementBytes)>> : std::true_type {};

// The packed form of accumulate: packs first, first + step, ... (< end) of V values each, with
// kPackedLoadFloats floats of Values (at least two packs) in flight, the first group loaded
// before zero() is called; address(k): where pack k starts. 32 floats rather than kLoadBatch
// values (four 16-byte bf16 packs of one tensor instead of two): ResNet-9 bf16 on an H200 4.854
// -> 4.835 ms a step, the built-in ResNet 0.959 -> 0.957.
constexpr int kPackedLoadFloats = 32;
template <int V, typename I, class Op, class Zero, class Address>
__device__ __forceinline__ typename Op::Local accumulate_packs(const Op& op, const Zero& zero,
                                                               I first, I end, I step,
                                                               const Address& address) {
  constexpr int kFloats = V * int(sizeof(typename Op::Value) / sizeof(float));
  constexpr int kPacks = kPackedLoadFloats / kFloats >= 2 ? kPackedLoadFloats / kFloats : 2;
  const I span = I(kPacks - 1) * step;
  I k = first;
  auto add_rest = [&](typename Op::Local& local) {
    for (; k < end; k += step) {
      typename Op::Value v[V];
      op.template load_packed<V>(address(k), v);
      add_values<V>(op, local, v);
    }
  };
  if (end <= span || k >= end - span) {
    typename Op::Local local = zero();
    add_rest(local);
    return local;
  }
  typename Op::Value v[kPacks][V];
#pragma unroll
  for (int u = 0; u < kPacks; ++u) op.template load_packed<V>(address(k + I(u) * step), v[u]);
  typename Op::Local local = zero();
#pragma unroll
  for (int u = 0; u < kPacks; ++u) add_values<V>(op, local, v[u]);
  for (k += I(kPacks) * step; k < end - span; k += I(kPacks) * step) {
#pragma unroll
    for (int u = 0; u < kPacks; ++u) op.template load_packed<V>(address(k + I(u) * step), v[u]);
#pragma unroll
    for (int u = 0; u < kPacks; ++u) add_values<V>(op, local, v[u]);
  }
  add_rest(local);
  return local;
}

// What the second pass reads of a value: the reduction's Value, or where the Op reads more there
// (a batch norm's residual), its `ApplyValue`, loaded by `template <int V> void load_apply(I at,
// ApplyValue (&)[V]) const` (V adjacent values, one pack of each tensor when V > 1).
template <class Op, class = void>
struct apply_value {
  using type = typename Op::Value;
};
template <class Op>
struct apply_value<Op, std::void_t<typename Op::ApplyValue>> {
  using type = typename Op::ApplyValue;
};
template <class Op>
using apply_value_t = typename apply_value<Op>::type;

// The second pass's inputs for the V adjacent values at `at` (one pack when V > 1).
template <int V, typename I, class Op>
__device__ __forceinline__ void load_values(const Op& op, I at, apply_value_t<Op> (&v)[V]) {
  if constexpr (!std::is_same_v<apply_value_t<Op>, typename Op::Value>)
    op.template load_apply<V>(at, v);
  else if constexpr (V > 1)
    op.template load_packed<V>(at, v);
  else
    v[0] = op.load(at);
}

// The second pass over units first, first + step, ... (< end) of V values each; address(k):
// where unit k starts. kLoadBatch values (two units at least) are loaded before their results
// are stored, so that their round trips overlap: the compiler cannot move a load above a store
// that may alias it (y may be x), and one round trip a unit left the ResNet's 7x7 batch norms
// (16 values a thread) latency-bound.
template <int V, typename I, class Op, class Address>
__device__ __forceinline__ void apply_units(const Op& op, I first, I end, I step,
                                            const Address& address, const float* coef_in) {
  float coef[coef_slots<Op>()];
  for (int w = 0; w < Op::kCoefWords; ++w) coef[w] = coef_in[w];
  constexpr int kUnits = kLoadBatch / V >= 2 ? kLoadBatch / V : 2;
  const I span = I(kUnits - 1) * step;
  I k = first;
  if (end > span) {
    for (; k < end - span; k += I(kUnits) * step) {
      apply_value_t<Op> v[kUnits][V];
#pragma unroll
      for (int u = 0; u < kUnits; ++u) load_values<V, I>(op, address(k + I(u) * step), v[u]);
#pragma unroll
      for (int u = 0; u < kUnits; ++u)
        op.template store_values<V>(address(k + I(u) * step), v[u], coef);
    }
  }
  for (; k < end; k += step) {
    apply_value_t<Op> v[V];
    load_values<V, I>(op, address(k), v);
    op.template store_values<V>(address(k), v, coef);
  }
}

}  // namespace trident::cuda
