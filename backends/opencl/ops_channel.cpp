// The per-channel slots (kernels/opencl/channel.cl): the affine map, and the channel sums cut into
// pieces (ChannelSplit) so that one channel with a very long run fills the device as well as
// many short channels do; x and y in the storage type they share (CallStorage).
#include <algorithm>

#include "trident/backends/opencl/call_storage.h"
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {
namespace {

// A piece is at least this many values (a group of 256 work-items adds 16 or more each, so the
// second launch that combines pieces is worth it) and there are at most kMaxPieces per channel.
constexpr size_t kMinPieceValues = 4096;
constexpr size_t kMaxPieces = 1024;

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

}  // namespace

ChannelSplit OpenClDevice::channel_split(int64_t outer, int64_t channels, int64_t inner,
                                         size_t floats_per_partial, size_t reserved) const {
  const size_t values = size_t(outer * inner), count = size_t(channels);
  // About 8 work-groups per compute unit hide memory latency on a GPU.
  const size_t wanted_groups = 8 * size_t(std::max(info_.compute_units, 1));
  const size_t scratch_floats = reduce_scratch().bytes / sizeof(float);
  const size_t fit = scratch_floats > reserved
                         ? (scratch_floats - reserved) / (floats_per_partial * count)
                         : 0;
  size_t pieces = std::min({ceil_div(wanted_groups, count), ceil_div(values, kMinPieceValues),
                            fit, kMaxPieces});
  if (pieces < 2 || values == 0) return ChannelSplit{1, cl_uint(values)};
  const size_t per_piece = ceil_div(values, pieces);
  return ChannelSplit{cl_uint(ceil_div(values, per_piece)), cl_uint(per_piece)};
}

void OpenClDevice::do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                     const Tensor& y, int64_t, int64_t channels, int64_t inner) {
  CallStorage call(*this, {&x, &y});
  const Tensor xs = call.in(x), ys = call.out(y);
  queue_.launch_typed(Kernel::channel_affine, call.type(), LaunchRange::items(size_t(x.numel())),
                      queue_.buffer(xs, "x"), queue_.optional(scale, "scale"),
                      queue_.optional(shift, "shift"), queue_.buffer(ys, "y"),
                      cl_uint(x.numel()), cl_uint(channels), cl_uint(inner));
  call.finish();
}

void OpenClDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                   int64_t outer, int64_t channels, int64_t inner, float beta) {
  CallStorage call(*this, {&x, &y});
  const Tensor xs = call.in(x), ys = call.in(y);
  const DType type = call.type();
  const BufferArg partial{reduce_scratch().mem, 0};
  const auto finish = [&](cl_uint pieces) {
    queue_.launch(Kernel::channel_sums_finish, LaunchRange::items(size_t(channels), 64), partial,
                  pieces, cl_uint(channels), queue_.buffer(out, "out"), beta);
  };
  if (outer == 0 || inner == 0) return finish(0);  // empty sums: out = beta * out
  const ChannelSplit split = channel_split(outer, channels, inner, 1, 0);
  const cl_int direct = split.pieces == 1;
  if (inner == 1) {  // the columns of a [rows, channels] matrix
    LaunchRange range;
    range.dims = 2;
    range.global[0] = ceil_div(size_t(channels), 32) * 32;
    range.global[1] = size_t(split.pieces) * 8;
    range.local[0] = 32;
    range.local[1] = 8;
    queue_.launch_typed(Kernel::channel_sums_columns, type, range, queue_.buffer(xs, "x"),
                        queue_.optional(ys, "y"), cl_uint(outer), cl_uint(channels),
                        split.per_piece, queue_.buffer(out, "out"), beta, partial, direct);
  } else {
    queue_.launch_typed(Kernel::channel_sums_runs, type,
                        LaunchRange::groups(size_t(split.pieces) * size_t(channels), 256),
                        queue_.buffer(xs, "x"), queue_.optional(ys, "y"), cl_uint(outer),
                        cl_uint(channels), cl_uint(inner), split.per_piece,
                        queue_.buffer(out, "out"), beta, partial, direct);
  }
  if (!direct) finish(split.pieces);
}

}  // namespace trident::opencl
