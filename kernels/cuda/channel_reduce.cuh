// The per-channel reduction engine of channel.cu and batchnorm.cu: x viewed as [outer, channels,
// inner] is reduced channel by channel (sums, batch-norm statistics, ...) in a fixed order, so the
// results are deterministic, and optionally a second pass over each channel uses the result.
// This file has the kernels and their launches; the thread- and block-level steps they are made
// of are in channel_reduce_steps.cuh.
//
// What is reduced is an Op<I> (I the index type):
//   kWords, kApply, kCoefWords   doubles in an accumulator; whether a second pass runs; floats of
//                                per-channel coefficients that pass reads
//   Local zero(I c)              a thread's running value for channel c (in float: fast)
//   Value load(I address)        what add needs of one value of that channel (its loads)
//   void add(Local&, const Value&)  that value added
//   void to_acc(const Local&, double* acc)      widened for the merges
//   static void merge(double* a, const double* b)  a = a followed by b (order matters for Welford)
//   void finish(I c, const double* acc, float* coef)  writes the op's results for channel c, and
//                                the coefficients of the second pass
//   (kApply) Params params(I c, bool finishing)  the channel's parameters that finish (finishing)
//                                or coefficients reads, loaded early (channel_reduce_apply_kernel)
//   (kApply) void finish(I c, const double* acc, const Params&, float* coef)  finish with them
//   (kApply) void coefficients(const double* acc, const Params&, float* coef)  the coefficients
//                                alone, without finish's writes
//   template <int V> void store_values(I address, const Value (&v)[V], const float* coef)
//                                (kApply) the second pass: the results of the V adjacent values
//                                at address (loaded as load / load_packed load them) stored;
//                                an Op that reads more there has ApplyValue and load_apply
//                                (channel_reduce_steps.cuh's load_values)
//
// Launch shapes: 1-D blocks over (channel, part) tasks, part p being a contiguous slice of the
// channel's outer * inner values; or, when inner == 1 (channels are the columns of a matrix),
// blocks of 32 channels x 8 row lanes so that each warp reads 32 adjacent columns. The parts per
// channel are chosen to fill the GPU: for planes, as many as one wave of resident blocks holds
// (a second, partial wave doubled the ResNet's 28x28 statistics). With one part a block owns its
// channel and runs the second pass itself (no scratch). With several and a second pass, where the
// device allows a cooperative launch, channel_reduce_apply_kernel does everything in one launch
// (each block merges its channel's partials after a grid-wide barrier and applies to its own
// part). Otherwise each block leaves its partial in the device's scratch, the last block to
// arrive (of all, or of its 32 columns) merges those channels' parts in a fixed order, finishes
// them and leaves the coefficients there, and channel_apply_kernel runs the second pass over all
// values. ResNet steps on an H100 (bf16): 1.520 ms with the old part counts, 1.490 with one wave,
// 1.461 with the fused launch (fp32 3.805 -> 3.774). Finishing per tile of columns matters for
// thousands of columns: one block finishing 4096 bias-gradient columns made a 4 MB reduction take
// 15 us on an H200; per-tile finishing took 20 us off the 4096-wide MLP's bf16 step on an H100
// (three such). A thread loads
// kLoadBatch values before it adds them (in its order), so that a slow add (then a Welford
// update's division) does not hold back the next loads (5% on batch-norm statistics, which stay
// latency-bound: under ncu on an H100, 30% occupancy, stalled on barriers about as much as on
// memory).
// Packed loads (optional): an Op with `static constexpr int kPackElementBytes` (its storage
// type's size), `bool packs_aligned(int bytes) const` and `template <int V> void
// load_packed(I address, Value (&v)[V]) const` (V adjacent values, one 16-, 8- or 4-byte load per
// tensor it reads) is read V values at a time where every run of the channel allows it (inner
// and the length multiples of V, pointers aligned): a thread then adds V adjacent values in
// order. Batch-norm statistics over bf16 reached ~300 GB/s reading one 2-byte value per load.
#pragma once
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "trident/kernels/cuda/channel_reduce_steps.cuh"
#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {

// V > 1: the channel's values are read in packs of V (see the top of the file). Three blocks per
// SM (at most 85 registers, a few bytes spilled in some ops) rather than the two that batch-norm
// statistics' 114 registers allowed: ResNet bf16 1.652 -> 1.628 ms, fp32 3.944 -> 3.910 on an H100.
template <typename I, class Op, int V = 1>
__global__ void __launch_bounds__(kBlockThreads, 3)
    channel_reduce_kernel(ChannelWalk<I> walk, I parts, Op op, ReduceScratch scratch) {
  wait_for_prior_grids();
  __shared__ double shared[Op::kWords * kBlockThreads];
  __shared__ float coef[coef_slots<Op>()];
  __shared__ bool last;
  const I tasks = walk.channels * parts;
  for (I task = I(blockIdx.x); task < tasks; task += I(gridDim.x)) {
    const I c = task / parts, part = task - c * parts;
    const I units = walk.length / I(V);  // values, or packs of V
    const I begin = I(int64_t(units) * int64_t(part) / int64_t(parts));
    const I end = I(int64_t(units) * int64_t(part + 1) / int64_t(parts));
    auto zero = [&] { return op.zero(c); };
    typename Op::Local local;
    if constexpr (V > 1)
      local = accumulate_packs<V, I>(op, zero, begin + I(threadIdx.x), end, I(kBlockThreads),
                                     [&](I k) { return walk.address(c, k * I(V)); });
    else
      local = accumulate<I>(op, zero, begin + I(threadIdx.x), end, I(kBlockThreads),
                            [&](I j) { return walk.address(c, j); });
    double acc[Op::kWords];
    op.to_acc(local, acc);
    block_merge<Op>(acc, shared);
    if (parts == 1) {  // this block owns channel c
      if (threadIdx.x == 0) op.finish(c, acc, coef);
      if constexpr (Op::kApply) {
        __syncthreads();
        apply_units<V, I>(op, I(threadIdx.x), units, I(kBlockThreads),
                          [&](I k) { return walk.address(c, k * I(V)); }, coef);
      }
      __syncthreads();  // coef is free for the next task
      continue;
    }
    if (threadIdx.x == 0) {
      for (int k = 0; k < Op::kWords; ++k) scratch.partials[int64_t(task) * Op::kWords + k] = acc[k];
      __threadfence();
      last = atomicAdd(scratch.counter, 1u) == static_cast<unsigned>(tasks) - 1u;
    }
    __syncthreads();
    if (last)
      finish_from_partials<I, Op>(op, I(0), walk.channels, parts, scratch, scratch.counter, shared);
  }
}

// Channels of planes in several parts each (Op::kApply), every block resident at once (a
// cooperative launch, one block a task): each block reduces its part, the grid synchronises,
// and every block merges its channel's partials itself, in the same fixed order, then applies
// the second pass to the part it reduced, which the L2 cache still holds. So no last block
// finishes all channels alone and no second launch reads x again from memory. The block of part
// 0 writes the channel's results (Op::finish); the others take only the coefficients. The
// channel's parameters (Op::params) are loaded before the reduction, so that their round trip is
// not one more after the barrier. (A barrier of a channel's blocks alone, one word a channel with
// grid.sync()'s algorithm, was no faster: ResNet bf16 on an H200 0.866 / 0.868 against 0.866 /
// 0.866 ms a step.)
template <typename I, class Op, int V>
__global__ void __launch_bounds__(kBlockThreads, 3)
    channel_reduce_apply_kernel(ChannelWalk<I> walk, I parts, Op op, ReduceScratch scratch) {
  wait_for_prior_grids();
  __shared__ double shared[Op::kWords * 32];  // block_merge's
  __shared__ float coef[coef_slots<Op>()];
  const I task = I(blockIdx.x), c = task / parts, part = task - c * parts;
  const I units = walk.length / I(V);  // values, or packs of V
  const I begin = I(int64_t(units) * int64_t(part) / int64_t(parts));
  const I end = I(int64_t(units) * int64_t(part + 1) / int64_t(parts));
  auto address = [&](I k) { return walk.address(c, k * I(V)); };
  typename Op::Params params{};
  if (threadIdx.x == 0) params = op.params(c, part == 0);
  auto zero = [&] { return op.zero(c); };
  typename Op::Local local;
  if constexpr (V > 1)
    local = accumulate_packs<V, I>(op, zero, begin + I(threadIdx.x), end, I(kBlockThreads),
                                   address);
  else
    local = accumulate<I>(op, zero, begin + I(threadIdx.x), end, I(kBlockThreads), address);
  double acc[Op::kWords];
  op.to_acc(local, acc);
  block_merge<Op>(acc, shared);
  if (threadIdx.x == 0)
    for (int k = 0; k < Op::kWords; ++k) scratch.partials[int64_t(task) * Op::kWords + k] = acc[k];
  cooperative_groups::this_grid().sync();
  const double* p = scratch.partials + int64_t(c) * parts * Op::kWords;
  if (parts <= I(32)) {  // lane l of warp 0 loads part l, warp_merge merges them
    if (threadIdx.x < 32) {
      const I lane = I(threadIdx.x);
      for (int k = 0; k < Op::kWords; ++k)
        acc[k] = lane < parts ? __ldcg(p + int64_t(lane) * Op::kWords + k) : 0.0;
      warp_merge<Op>(acc);
    }
  } else {  // thread t merges parts t, t + 256, ...; then a tree over the threads
    for (int k = 0; k < Op::kWords; ++k) acc[k] = 0.0;  // merge's identity (no loads: after
                                                        // the barrier, y may have replaced x)
    if (I(threadIdx.x) < parts)
      merge_parts<I, Op>(p, I(threadIdx.x),
                         (parts - I(threadIdx.x) + I(kBlockThreads) - 1) / I(kBlockThreads),
                         I(kBlockThreads), acc);
    block_merge<Op>(acc, shared);
  }
  if (threadIdx.x == 0) {
    if (part == 0)
      op.finish(c, acc, params, coef);
    else
      op.coefficients(acc, params, coef);
  }
  __syncthreads();
  apply_units<V, I>(op, begin + I(threadIdx.x), end, I(kBlockThreads), address, coef);
}

// inner == 1: x is [rows, channels]; blockIdx.x picks 32 channels, blockIdx.y the part of rows.
// The last block of the 32 channels to arrive finishes them (its counter: counter[1 + blockIdx.x]),
// so that thousands of channels (a bias gradient) are finished by many blocks, not by one.
template <typename I, class Op>
__global__ void __launch_bounds__(kColumnChannels * kColumnLanes)
    column_reduce_kernel(I rows, I channels, I parts, Op op, ReduceScratch scratch) {
  wait_for_prior_grids();
  __shared__ double shared[Op::kWords * kColumnLanes * kColumnChannels];
  __shared__ float coef[kColumnChannels][coef_slots<Op>()];
  __shared__ bool last;
  const int x = threadIdx.x, y = threadIdx.y;
  const I c = I(blockIdx.x) * kColumnChannels + I(x), part = I(blockIdx.y);
  const bool active = c < channels;
  const I begin = I(int64_t(rows) * int64_t(part) / int64_t(parts));
  const I end = I(int64_t(rows) * int64_t(part + 1) / int64_t(parts));
  auto zero = [&] { return op.zero(active ? c : I(0)); };
  const typename Op::Local local =
      active ? accumulate<I>(op, zero, begin + I(y), end, I(kColumnLanes),
                             [&](I r) { return r * channels + c; })
             : zero();
  double acc[Op::kWords];
  op.to_acc(local, acc);
  column_merge<Op>(acc, shared);
  if (parts == 1) {
    if (y == 0 && active) op.finish(c, acc, coef[x]);
    if constexpr (Op::kApply) {
      __syncthreads();
      if (active)
        apply_units<1, I>(op, I(y), rows, I(kColumnLanes),
                          [&](I r) { return r * channels + c; }, coef[x]);
    }
    return;
  }
  if (y == 0 && active) {
    for (int k = 0; k < Op::kWords; ++k)
      scratch.partials[(int64_t(c) * parts + part) * Op::kWords + k] = acc[k];
    __threadfence();
  }
  __syncthreads();
  unsigned int* counter = scratch.counter + 1 + blockIdx.x;
  if (x == 0 && y == 0) last = atomicAdd(counter, 1u) == gridDim.y - 1u;
  __syncthreads();
  if (last) {
    const I first = I(blockIdx.x) * kColumnChannels;
    const I count = channels - first < I(kColumnChannels) ? channels - first : I(kColumnChannels);
    finish_from_partials<I, Op>(op, first, count, parts, scratch, counter, shared);
  }
}

// The second pass when channels were split into parts: value i of x ([outer, channels, inner]);
// V > 1: values [V i, V i + V) of one channel (inner a multiple of V), in one pack.
template <typename I, class Op, int V = 1>
__global__ void channel_apply_kernel(I total, I channels, Divider<I> by_inner,
                                     Divider<I> by_channels, Op op, const float* coefficients) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I q = by_inner.div(i * I(V));
    const I c = q - by_channels.div(q) * channels;
    float coef[coef_slots<Op>()];
    for (int k = 0; k < Op::kCoefWords; ++k) coef[k] = coefficients[int64_t(c) * Op::kCoefWords + k];
    apply_value_t<Op> v[V];
    load_values<V, I>(op, i * I(V), v);
    op.template store_values<V>(i * I(V), v, coef);
  }
}

// The widest pack (16 bytes at most) that every run of `inner` values of a channel and the Op's
// pointers allow: 1 for an Op without packed loads. Passed to f as with_pack_width does.
template <class Op, class F>
void with_channel_pack(int64_t inner, const Op& op, F&& f) {
  if constexpr (has_packed_loads<Op>::value) {
    constexpr int kElement = Op::kPackElementBytes;
    int pack = 16 / kElement;
    while (pack > 1 && (inner % pack != 0 || !op.packs_aligned(pack * kElement))) pack /= 2;
    with_pack_width<kElement>(pack, f);
  } else {
    f(std::integral_constant<int, 1>());
  }
}

// channel_apply_kernel over x [outer, channels, inner], in packs where the Op has them and the
// channel's runs and pointers allow (as the reduction's loads).
template <typename I, class Op>
void launch_channel_apply(const KernelContext& ctx, int64_t total, int64_t channels,
                          int64_t inner, const Op& op, const float* coefficients) {
  with_channel_pack(inner, op, [&](auto width) {
    constexpr int V = decltype(width)::value;
    launch(ctx, channel_apply_kernel<I, Op, V>, grid_for(total / V), kBlockThreads, 0,
           I(total / V), I(channels), Divider<I>(std::max<int64_t>(inner, 1)),
           Divider<I>(channels), op, coefficients);
  });
}

// Blocks of `kernel` (kBlockThreads threads, no dynamic shared memory) resident on an SM of the
// current device at once; `fallback` if unknown. Asked each time (a host call that reads cached
// attributes): GPUs of different kinds may train together.
template <class Kernel>
int64_t resident_blocks(Kernel kernel, int fallback) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockThreads, 0) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    blocks = fallback;
  }
  return int64_t(blocks);
}

// channel_reduce_apply_kernel as a cooperative launch of `blocks` (a kernel node of a captured
// graph as well), with programmatic dependent launch where ctx allows it, as launch() does: its
// blocks wait for the kernel before (wait_for_prior_grids) before they meet at the grid barrier,
// and that kernel's blocks retire whatever this one does, so every block still becomes resident.
// ResNet on an H200, whole steps: bf16 0.900 -> 0.888 ms, fp16 0.967 -> 0.955, fp32 2.138 ->
// 2.131 (18 batch norms a step). Thread-block clusters in place of the grid barrier (a cluster of
// parts a channel, partials merged through distributed shared memory) gained no kernel time under
// ncu, and clusters of 12 (the 28x28 layers) doubled fp16's 28x28 gradient (38 against 23 us).
template <typename I, class Op, int V>
void launch_reduce_apply(const KernelContext& ctx, unsigned blocks, const ChannelWalk<I>& walk,
                         I parts, const Op& op) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kBlockThreads);
  config.stream = ctx.stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeCooperative;
  attributes[0].val.cooperative = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  config.numAttrs = ctx.dependent_launch ? 2 : 1;
  (void)cudaLaunchKernelEx(&config, channel_reduce_apply_kernel<I, Op, V>, walk, parts, op,
                           ctx.scratch);  // a failure shows as the launch's error
}

// Reduces x[outer, channels, inner] channel by channel with `op` (and applies, if Op::kApply).
template <typename I, class Op>
void run_channel_reduce(const KernelContext& ctx, int64_t outer, int64_t channels, int64_t inner,
                        const Op& op) {
  const int64_t length = outer * inner;
  const int64_t sms = int64_t(std::max(ctx.sms, 1));
  const ReduceScratch& scratch = ctx.scratch;
  // Parts per channel: as wanted, but few enough values per thread that its float accumulation
  // stays accurate (at most max_values), and at least a few; no more than the scratch holds
  // (partials, and the coefficients of a separate second pass).
  auto parts_for = [&](int64_t wanted, int64_t threads, int64_t max_parts, int64_t max_values) {
    int64_t parts = std::max(wanted, (length + max_values * threads - 1) / (max_values * threads));
    parts = std::min(parts, length / (16 * threads));
    parts = std::min(parts, scratch.partial_words / (channels * Op::kWords));
    parts = std::min(parts, max_parts);
    if (Op::kApply && channels * Op::kCoefWords > scratch.coefficient_words) parts = 1;
    return std::max<int64_t>(parts, 1);
  };
  if (inner == 1 && channels > 1) {
    const int64_t tiles = (channels + kColumnChannels - 1) / kColumnChannels;
    // One arrival counter per tile of columns, after the kernels' shared counter[0].
    // Four blocks an SM at least: mlp-big's bias gradients took 0.608 ms a bf16 step with
    // four, 0.611 with two (H100).
    const int64_t wanted = tiles >= 4 * sms ? 1 : (4 * sms + tiles - 1) / tiles;
    const int64_t parts =
        tiles < scratch.counter_words ? parts_for(wanted, kColumnLanes, 65535, 64) : 1;
    launch(ctx, column_reduce_kernel<I, Op>, dim3(unsigned(tiles), unsigned(parts)),
           dim3(kColumnChannels, kColumnLanes), 0, I(outer), I(channels), I(parts), op, scratch);
    if constexpr (Op::kApply) {
      if (parts > 1)
        launch(ctx, channel_apply_kernel<I, Op>, grid_for(length * channels), kBlockThreads, 0,
               I(length * channels), I(channels), Divider<I>(1), Divider<I>(channels), op,
               scratch.coefficients);
    }
    return;
  }
  ChannelWalk<I> walk;
  walk.channels = I(channels);
  walk.inner = I(inner);
  walk.length = I(length);
  walk.by_inner = Divider<I>(std::max<int64_t>(inner, 1));
  walk.one_run = outer == 1 || channels == 1;
  int64_t parts = 1;
  // Packs of V values: length = outer * inner is a multiple of V when inner is.
  with_channel_pack(inner, op, [&](auto width) {
    constexpr int V = decltype(width)::value;
    constexpr auto kernel = channel_reduce_kernel<I, Op, V>;
    // Channels of planes: as many parts as one wave of resident blocks holds (up to 128 values
    // a thread), not more: under ncu on an H100 a second wave of 20 blocks doubled the time of
    // the ResNet's 28x28 batch-norm statistics (416 blocks, 396 resident).
    const int64_t resident = std::max<int64_t>(1, resident_blocks(kernel, 1));
    parts = parts_for(std::max<int64_t>(1, resident * sms / channels), kBlockThreads, INT32_MAX,
                      128);
    const int64_t tasks = channels * parts;
    // Fused where every block fits one wave (32-bit indices only: fewer kernels to build).
    if constexpr (Op::kApply && std::is_same_v<I, int32_t>) {
      if (parts > 1 && ctx.cooperative_launch &&
          tasks <= resident_blocks(channel_reduce_apply_kernel<I, Op, V>, 0) * sms) {
        launch_reduce_apply<I, Op, V>(ctx, unsigned(tasks), walk, I(parts), op);
        parts = 1;  // applied
        return;
      }
    }
    const unsigned grid = unsigned(std::min<int64_t>(tasks, int64_t(1) << 24));
    launch(ctx, kernel, grid, kBlockThreads, 0, walk, I(parts), op, scratch);
  });
  if constexpr (Op::kApply) {
    if (parts > 1)
      launch_channel_apply<I>(ctx, length * channels, channels, inner, op, scratch.coefficients);
  }
}

}  // namespace trident::cuda
