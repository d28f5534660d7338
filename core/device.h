// The backend-abstract device interface, in two layers (as ArrayFire and PyTorch split them):
// - the public, non-virtual ops below: each checks its arguments once (defined tensors of this
//   device, dtypes, element counts, strides, aliasing, the device's size limits), fills defaults
//   and states the op's edge semantics once, the same on every backend (core/device_ops.cpp);
// - the protected `do_*` slots a backend implements, called only with checked arguments.
//
// Slots are REQUIRED (pure virtual: memory, copies, ordering and a minimal op set) or OPTIONAL
// (fused or composite ops with a default in core/default_ops.cpp built from the required ones,
// which a backend overrides when it has something faster; an override may call the default for
// the cases it does not handle). A new backend runs once it implements the required slots.
//
// Every op is queued in order on the device's stream / queue (queue_beside's work aside) and may
// return before it has run; only copy_to_host and synchronize wait. Unless an op says otherwise
// its float tensors are float32, outputs are overwritten (never accumulated into), an output may
// not overlap an input, and gradients are overwritten by every backward op (no zeroing needed).
//
// Data-dependent errors (a gather index or a label out of range) cannot be seen by the front: a
// GPU kernel that meets one skips the access and raises the device's error flag, which the next
// synchronize() or copy_to_host() turns into a BackendError naming the op; the CPU throws at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trident/core/device_types.h"
#include "trident/core/dtype.h"
#include "trident/core/half.h"
#include "trident/core/op_types.h"
#include "trident/core/tensor.h"

namespace trident {

class CachingAllocator;

// A recorded sequence of queued work that can be run again without the host re-issuing it.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;
};

// The op families a backend may compute natively in 16-bit floats (Device::native). For the
// others, the front converts 16-bit operands through float32 scratch around the float32 kernel.
enum class OpFamily : uint8_t {
  convert,      // convert(): the device holds the type at all (required for any other family)
  gemm,         // A and B of one 16-bit type, C float32 or the same type, bias float32
  elementwise,  // unary, dropout, axpby
  channel,      // channel_affine, channel_sums (scale, shift, sums float32)
  conv2d,       // x, w, y, dx, dy, and im2col / col2im (dw, db float32)
  pool,         // max and average pooling
  batchnorm,    // x, y, dx, dy (parameters and statistics float32)
  head,         // log-softmax, losses, count_correct (losses float32)
  gather,       // gather_samples' output
};

// Codes a kernel writes into the device's error flag (word 0; word 1 holds the offending value).
enum class DeviceErrorCode : int32_t { none = 0, gather_index = 1, table_position = 2, label = 3 };

class Device {
 public:
  Device();
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const = 0;
  // Devices that return the same token share one address space (the CPU devices of
  // TRIDENT_CPU_DEVICES): a tensor of one may be passed to the ops of another, so that they can
  // share one copy of a data set.
  virtual const void* memory_space() const { return this; }

  // ---- memory and ordering ---------------------------------------------------------------------
  // The caching pool every Tensor allocates from (built on do_allocate / do_free).
  CachingAllocator& allocator();
  // Raw byte copies (Tensor's methods are the checked way to use them). copy_from_host: `host`
  // may be reused as soon as it returns; copy_to_host waits for all queued work first; regions
  // of copy_on_device must not overlap.
  void copy_from_host(DeviceMemory dst, const void* host, size_t bytes);
  void copy_to_host(void* host, DeviceMemory src, size_t bytes);
  void copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes);
  // dst = value converted to dst's dtype (f32, i32; 0 zeroes any dtype).
  void fill(const Tensor& dst, float value);
  // Waits until all queued work has finished; rethrows a failure it met.
  void synchronize();
  // Records the work `step` queues and returns it for replay, or nullptr where the backend cannot
  // capture: callers then simply call `step` every time. `step` must not allocate or free device
  // memory, nor read values back.
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& step);

  // ---- a second queue, for work that may run beside the rest -----------------------------------
  // Queues the ops `work` issues on the device's side queue: they start once everything queued
  // before this call has run and may run beside whatever is queued after it, until join_beside().
  // The caller keeps the two apart: side work may not touch memory that main-queue work queued
  // meanwhile reads or writes, and what it uses must live until the join; it may not allocate.
  // Unless side_queue_runs_every_op(), only elementwise ops may go beside (the optimizer updates,
  // convert, fill, scale, axpby, unary_forward): the others share the device's scratch and
  // library handles, and throw there, as do nested calls. Where the backend has one queue (the
  // default; has_side_queue() false) `work` runs in order. The Trainer queues each layer's
  // optimizer update beside the backward of the layers below; a Residual its projection shortcut
  // beside its body where every op may go.
  void queue_beside(const std::function<void()>& work);
  // Makes the work queued after this call wait for all side work queued so far. synchronize(),
  // the host copies and capture() join first, so side work is never left behind a read.
  void join_beside();
  // Makes the work queued after this call wait for the last queue_beside call's work only: side
  // work that ops queued since then (conv2d_backward's weight gradients) keeps running.
  void join_last_beside();
  bool has_side_queue() const { return do_has_side_queue(); }
  // Whether every op may be queued beside, not only the elementwise ones: the side queue has its
  // own scratch and library handles, and nothing queued there waits for the whole device.
  bool side_queue_runs_every_op() const {
    return do_has_side_queue() && do_side_queue_runs_every_op();
  }
  // True while queue_beside's work is being queued (the op checks refuse the ops that may not).
  bool queuing_beside() const { return beside_; }
  // Whether side work was queued since the last join_beside() (work that reads what it writes
  // must join first: a collective handed a gradient buffer, for one).
  bool beside_pending() const { return beside_pending_; }

  // ---- dtypes ------------------------------------------------------------------------------------
  // Whether this device holds tensors of dtype at all (float32 always; 16-bit floats when the
  // backend converts them): ops refuse float types it does not support.
  bool supports(DType dtype) const;
  // Whether ops of `family` compute on dtype without staging it through float32 scratch.
  bool native(OpFamily family, DType dtype) const { return dtype == DType::f32 || do_native(family, dtype); }
  // Whether the native kernels of `family` also take one call's operands in different float
  // types (float32 beside a native 16-bit type, as unary_forward and scale allow). Where not,
  // a call that mixes types has all its 16-bit operands staged.
  bool native_mixed(OpFamily family) const { return do_native_mixed(family); }
  // dst = src converted to dst's dtype, elementwise, rounding to nearest even (float32, float16,
  // bfloat16, and uint8 to any float type); the same element count.
  void convert(const Tensor& src, const Tensor& dst);
  // y = x * factor[0], with factor f32 [1] on the device (a scale that changes between replays
  // of a captured step: fp16 loss scaling). x and y of any float type, y may be x.
  void scale(const Tensor& x, const Tensor& factor, const Tensor& y);

  // ---- linear algebra --------------------------------------------------------------------------
  // See GemmArgs (core/op_types.h). C may not overlap A, B or the bias. A and B of one float type
  // (16-bit: float32 accumulation), C float32 or A's type, bias float32.
  void gemm(const GemmArgs& args);
  // y = activation(a * x + b * y) over all elements (x and y the same size; the activation one
  // of the unary family, as unary_forward applies it, in float32 before y's rounding); b == 0:
  // y is not read. A residual block's sum and its ReLU in one pass.
  void axpby(const Tensor& x, const Tensor& y, float a, float b,
             UnaryOp activation = UnaryOp::identity, float alpha = 0.0f);

  // ---- elementwise ---------------------------------------------------------------------------
  // y = op(x); y may be x itself (same memory).
  void unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha = 0.0f);
  // dx = dy * op'(x), computed from y = op(x) where the op allows (relu, leaky_relu, tanh,
  // sigmoid) and from x otherwise (unary_backward_needs_input); the other may be undefined.
  // dx may be dy itself.
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      const Tensor& dx, float alpha = 0.0f);
  // dx = (dy + dy_more) * op'(x), as unary_backward, for a gradient that arrives in two parts:
  // a residual block's input gradient (its two branches' sum) going back through the activation
  // of the block before it, in one pass. dx may be dy itself, not dy_more.
  void unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                          const Tensor& dy_more, const Tensor& dx, float alpha = 0.0f);
  // Inverted dropout: y[i] = keep(g) ? x[i] / (1 - p) : 0 with g = group_offset + i / group.
  // keep(g) = philox_uniform(seed, stream, step_state[1], g) >= p (core/philox.h defines it
  // bit for bit). group = 1 is Dropout, group = H*W is Dropout2d (one draw per channel). The
  // backward pass is the same call on dy. y may be x itself.
  void dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset, float p,
               uint64_t seed, uint32_t stream, const Tensor& step_state);

  // ---- per-channel broadcast and reduction, over x viewed as [outer, channels, inner] --------
  // y = x * scale[c] + shift[c]; scale or shift undefined: 1 or 0. y may be x itself.
  void channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                      const Tensor& y, int64_t outer, int64_t channels, int64_t inner);
  // out[c] = beta * out[c] + sum over outer and inner of x (times y, when y is defined: sums of
  // squares and products). beta == 0: out is not read.
  void channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                    int64_t channels, int64_t inner, float beta);
  // db[cols] = beta * db + sum over rows of dy[rows, cols]: channel_sums with inner 1.
  void sum_rows(const Tensor& dy, int64_t rows, int64_t cols, const Tensor& db, float beta);

  // ---- convolution ---------------------------------------------------------------------------
  // Bytes of scratch conv2d_forward / conv2d_backward need for this shape.
  size_t conv2d_workspace_bytes(const Conv2dShape& s) const;
  // y[N, OC, OH, OW] = conv(x[N, C, H, W], w) + b (b undefined: no bias). The front remembers
  // what the workspace holds after the forward (the backend may leave data derived from x there),
  // and tells the backward when it is still valid: no write through this device to the workspace
  // or to x happened in between. Model code never sees that state.
  void conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y, const Tensor& workspace);
  // dw (and db, and dx, each unless undefined) from dy[N, OC, OH, OW]. weight_gradient_beside:
  // where the device has a side queue, the backend may finish dw and db there, beside what is
  // queued next (the caller then joins, join_beside(), before anything reads dw or db or this
  // workspace is used again; queue_beside's work queued later runs after them).
  void conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& dy,
                       const Tensor& dx, const Tensor& dw, const Tensor& db,
                       const Tensor& workspace, bool weight_gradient_beside = false);
  // One sample's patch matrix: col[C*KH*KW, OH*OW] from x[C, H, W] (zero outside the image);
  // row (c, kh, kw), column (oh, ow) holds x[c, oh*SH - PH + kh, ow*SW - PW + kw]. s.batch is
  // ignored. col2im is its adjoint: dx[C, H, W] = the columns summed back (overwrites dx).
  void im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col);
  void col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx);

  // ---- pooling ---------------------------------------------------------------------------------
  // y[N, C, OH, OW] = window max; argmax (i32, same shape) = flat h*W+w of the first maximum in
  // x's plane (NaN wins, as in PyTorch); see Pool2dShape::relu.
  void maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                         const Tensor& argmax);
  // dx[N, C, H, W] = dy added at the argmax positions, zero elsewhere (-1 sends nothing).
  void maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                          const Tensor& dx);
  // y = window mean (padding counted); its backward spreads dy / window size over each window.
  void avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y);
  void avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx);

  // ---- normalisation ---------------------------------------------------------------------------
  // y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c] (gamma, beta undefined: 1, 0). Training:
  // mean and invstd = 1/sqrt(var + eps) of this batch (biased variance) are written to
  // save_mean / save_invstd [C] for the backward, and running_mean / running_var are updated
  // (see BatchNormShape). Evaluation: the running statistics, nothing written but y. s.relu:
  // y = max(that, 0).
  void batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                         const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                         const Tensor& save_invstd);
  // A residual block's batch norm and sum in one pass: y = normalise(x) + residual, then
  // max(y, 0) if s.relu (the ReLU after the sum, not before it). Training and evaluation as
  // batchnorm_forward; residual is of y's shape and type, disjoint from y (it may overlap x).
  // The backward is batchnorm_backward without a ReLU, given the gradient of the sum (after
  // the ReLU's, which the caller takes from y).
  void batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                             const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var,
                             const Tensor& y, const Tensor& save_mean,
                             const Tensor& save_invstd);
  // dx, and dgamma / dbeta (unless undefined), for the training forward that saved
  // save_mean / save_invstd. s.relu: dy counts only where that forward's output was positive,
  // i.e. where (x - mean) * invstd * gamma + beta > 0, recomputed from x (beta, read only then,
  // undefined: 0; the output itself is not read). dx may be dy.
  void batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                          const Tensor& beta = Tensor());

  // ---- losses and the classification head (x, y, dx: [rows, cols]; labels: i32 [rows]) -------
  // The target distribution of a row with label l and label smoothing e in [0, 1):
  // t[c] = (1 - e) * (c == l) + e / cols (PyTorch's CrossEntropyLoss label_smoothing).
  // y[r, :] = x[r, :] - logsumexp(x[r, :]).
  void log_softmax_forward(const Tensor& x, const Tensor& y);
  // dx = dy - exp(y) * sum(dy[r, :]) (y is the forward output).
  void log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
  // loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -sum_c t[c] * logp[r, c].
  void nll_loss_forward(const Tensor& logp, const Tensor& labels, const Tensor& loss,
                        bool accumulate, float label_smoothing = 0.0f);
  // dlogp[r, c] = -scale * t[c] (scale = 1/rows for the mean loss).
  void nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                         float label_smoothing = 0.0f);
  // The training head in one op (cross-entropy on logits): y = log_softmax(x), the loss as
  // nll_loss_forward on y, and dx = grad_scale * (exp(y) - t), the gradient of the summed loss
  // times grad_scale (1/rows: of the mean).
  void log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                       float label_smoothing, const Tensor& y, const Tensor& loss,
                       bool accumulate, const Tensor& dx);
  // Mean squared error against the one-hot labels (PyTorch's MSELoss, mean over all elements):
  // loss[0] = (accumulate ? loss[0] : 0) + sum (x - onehot)^2 / (rows * cols);
  // dx = grad_scale * 2 * (x - onehot) / cols (grad_scale 1/rows: of the mean).
  void mse_loss(const Tensor& x, const Tensor& labels, float grad_scale, const Tensor& loss,
                bool accumulate, const Tensor& dx);
  // correct[0] += number of rows whose first maximal score is at labels[r] (f32 count).
  void count_correct(const Tensor& scores, const Tensor& labels, const Tensor& correct);

  // ---- data --------------------------------------------------------------------------------------
  // dst[i, ...] = src[table[step_state[0] * rows + i], ...] for i < rows = dst.dim(0); rows of
  // any dtype (src and dst alike). Only batch indices travel per step; the data set stays resident.
  void gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                   const Tensor& dst);
  // A batch of samples: dst[i] (f32 [rows, C, H, W]) = transform(src[table[step_state[0] * rows
  // + i]]) with src [count, C, H, W] in u8 or f32; see SampleTransform.
  void gather_samples(const Tensor& src, const Tensor& table, const Tensor& step_state,
                      const SampleTransform& transform, const Tensor& dst);
  // step_state[0] += 1, step_state[1] += 1.
  void advance_step(const Tensor& step_state);

  // ---- optimizer updates, one launch over a whole flat parameter buffer -----------------------
  // See SgdParams; momentum may be undefined when hp.momentum == 0 and there is no schedule.
  // compute_copy (optional, f16 or bf16, params' count): after the update it holds the params
  // rounded to its type, as convert() would write them (the compute-type weights of a 16-bit
  // run, written while the params are at hand instead of in a pass of their own).
  void sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                  const SgdParams& hp, const UpdateControl& control, const Tensor& step_state,
                  const Tensor& compute_copy = Tensor());
  // See AdamParams; compute_copy as for sgd_update.
  void adam_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                   const AdamParams& hp, const UpdateControl& control,
                   const Tensor& step_state, const Tensor& compute_copy = Tensor());
  // Dynamic loss scaling after a step: see LossScaleParams. state f32 [2], grad_sumsq f32 [1].
  void update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                         const LossScaleParams& params);

  // ---- scratch -------------------------------------------------------------------------------
  // Device memory for one op's temporaries (16-bit operands staged through float32): a region
  // of a grow-only arena, valid until release_scratch(mark). The arena cannot grow while a step
  // is being captured: the eager first step sizes it.
  size_t scratch_mark() const { return scratch_used_; }
  Tensor scratch(DType dtype, const Shape& shape);
  void release_scratch(size_t mark) { scratch_used_ = mark; }

 protected:
  // A backend's op queued work on the side queue itself (conv2d_backward's weight gradient):
  // the next join_beside() waits for it.
  void note_work_beside() { beside_pending_ = true; }
  // ---- required slots ----------------------------------------------------------------------------
  // A fresh allocation; throws OutOfMemory naming requested and free bytes.
  virtual void* do_allocate(size_t bytes) = 0;
  // Returns an allocation; ordered after all work queued so far that uses it.
  virtual void do_free(void* handle) noexcept = 0;
  virtual void do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) = 0;
  virtual void do_copy_to_host(void* host, DeviceMemory src, size_t bytes) = 0;
  virtual void do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) = 0;
  virtual void do_fill(const Tensor& dst, float value) = 0;
  virtual void do_synchronize() = 0;
  // GEMM without epilogue (args.has_epilogue() is false); strides are filled in.
  virtual void do_gemm(const GemmArgs& args) = 0;
  virtual void do_axpby(const Tensor& x, const Tensor& y, float a, float b) = 0;
  virtual void do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) = 0;
  virtual void do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                                 const Tensor& dx, float alpha) = 0;
  virtual void do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                          float p, uint64_t seed, uint32_t stream, const Tensor& step_state) = 0;
  virtual void do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                 const Tensor& y, int64_t outer, int64_t channels,
                                 int64_t inner) = 0;
  virtual void do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                               int64_t outer, int64_t channels, int64_t inner, float beta) = 0;
  virtual void do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) = 0;
  virtual void do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) = 0;
  virtual void do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                                    const Tensor& argmax) = 0;
  virtual void do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                     const Tensor& argmax, const Tensor& dx) = 0;
  virtual void do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) = 0;
  virtual void do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                     const Tensor& dx) = 0;
  virtual void do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                    const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    const Tensor& y, const Tensor& save_mean,
                                    const Tensor& save_invstd) = 0;
  virtual void do_batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                                     const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dx,
                                     const Tensor& dgamma, const Tensor& dbeta,
                                     const Tensor& beta) = 0;  // beta: s.relu only
  virtual void do_log_softmax_forward(const Tensor& x, const Tensor& y) = 0;
  virtual void do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;
  virtual void do_nll_loss_forward(const Tensor& logp, const Tensor& labels, const Tensor& loss,
                                   bool accumulate, float label_smoothing) = 0;
  virtual void do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                    float label_smoothing) = 0;
  virtual void do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                           const Tensor& loss, bool accumulate, const Tensor& dx) = 0;
  virtual void do_count_correct(const Tensor& scores, const Tensor& labels,
                                const Tensor& correct) = 0;
  virtual void do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                              const Tensor& dst) = 0;
  virtual void do_gather_samples(const Tensor& src, const Tensor& table,
                                 const Tensor& step_state, const SampleTransform& transform,
                                 const Tensor& dst) = 0;
  virtual void do_advance_step(const Tensor& step_state) = 0;
  virtual void do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                             const SgdParams& hp, const UpdateControl& control,
                             const Tensor& step_state) = 0;
  virtual void do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                              const Tensor& v, const AdamParams& hp,
                              const UpdateControl& control, const Tensor& step_state) = 0;

  // ---- optional slots (defaults in core/default_ops.cpp) -----------------------------------------
  // The updates with a compute copy (sgd_update's compute_copy). Default: the update, then
  // convert(params, compute_copy).
  virtual void do_sgd_update_with_copy(const Tensor& params, const Tensor& grads,
                                       const Tensor& momentum, const SgdParams& hp,
                                       const UpdateControl& control, const Tensor& step_state,
                                       const Tensor& compute_copy);
  virtual void do_adam_update_with_copy(const Tensor& params, const Tensor& grads, const Tensor& m,
                                        const Tensor& v, const AdamParams& hp,
                                        const UpdateControl& control, const Tensor& step_state,
                                        const Tensor& compute_copy);
  // 16-bit support: dtype conversion (the default: none, so the device holds only float32), and
  // the families computed natively (the default: none; the front stages the rest).
  virtual void do_convert(const Tensor& src, const Tensor& dst);
  virtual bool do_native(OpFamily family, DType dtype) const;
  // Default: true (each operand's type is the kernel's business).
  virtual bool do_native_mixed(OpFamily family) const;
  // unary_backward_sum. Default: do_axpby (dx = dy + dy_more), then do_unary_backward in place
  // on dx.
  virtual void do_unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y,
                                     const Tensor& dy, const Tensor& dy_more, const Tensor& dx,
                                     float alpha);
  // batchnorm_add_forward. Default: do_batchnorm_forward without the ReLU, then
  // do_axpby_activation (y = act(residual + y)).
  virtual void do_batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                        const Tensor& residual, const Tensor& gamma,
                                        const Tensor& beta, const Tensor& running_mean,
                                        const Tensor& running_var, const Tensor& y,
                                        const Tensor& save_mean, const Tensor& save_invstd);
  // axpby with an activation other than identity. Default: do_axpby, then do_unary_forward in
  // place on y.
  virtual void do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                                   UnaryOp activation, float alpha);
  // Default: a GEMM of x as a column [n, 1] by factor as [1, 1].
  virtual void do_scale(const Tensor& x, const Tensor& factor, const Tensor& y);
  // A one-thread kernel in a backend that trains in float16 (the state stays on the device, so
  // that a captured step replays with the current scale). Default: refused (no float16 training).
  virtual void do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                                    const LossScaleParams& params);
  // Default: nullptr (no capture; the step runs eagerly every time).
  virtual std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step);
  // The side queue (see queue_beside). Default: none; begin/end/join are then never called.
  // begin: later ops go to the side queue, after all work queued so far; end: back to the main
  // queue; join: the main queue's later work waits for the side work queued so far.
  virtual bool do_has_side_queue() const { return false; }
  // Default: false (only the elementwise ops listed under queue_beside go beside).
  virtual bool do_side_queue_runs_every_op() const { return false; }
  virtual void do_begin_beside() {}
  virtual void do_end_beside() {}
  virtual void do_join_beside() {}
  // Default: do_join_beside.
  virtual void do_join_last_beside() { do_join_beside(); }
  // GEMM with bias and/or activation (args.has_epilogue()). Default: do_gemm, then
  // channel_affine for the bias, then unary_forward.
  virtual void do_gemm_fused(const GemmArgs& args);
  // Default: one sample's im2col columns (the workspace of the default convolution).
  virtual size_t do_conv2d_workspace_bytes(const Conv2dShape& s) const;
  // Default: per sample, im2col then GEMM, bias through channel_affine. Returns whether the
  // workspace now holds something derived from x that a backward may reuse (the default: no).
  virtual bool do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                 const Tensor& b, const Tensor& y, const Tensor& workspace);
  // Default: per sample, im2col, dw += dy_n col_n^T, col2im(W^T dy_n); db by channel_sums.
  // workspace_valid: the workspace still holds what this backend's forward left there for the
  // same x, w and shape, neither written since. Returns whether it still does afterwards.
  // weight_gradient_beside: dw and db may be finished on the side queue (see conv2d_backward;
  // never inside queue_beside's work). Ops the front would refuse there may go only where the
  // backend knows they share nothing with the main queue (a side_queue_runs_every_op() backend
  // may send any); a backend that forks calls note_work_beside().
  virtual bool do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                  const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                  const Tensor& db, const Tensor& workspace,
                                  bool workspace_valid, bool weight_gradient_beside);
  // Default: log_softmax_forward, nll_loss_forward, then dx = grad_scale * (exp(y) - t) through
  // nll_loss_backward and log_softmax_backward (on the y and dx buffers).
  virtual void do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                  float label_smoothing, const Tensor& y, const Tensor& loss,
                                  bool accumulate, const Tensor& dx);

  // ---- for backends ------------------------------------------------------------------------------
  // Derived destructors call this first: it hands cached blocks back through do_free while the
  // derived object (and its driver context) still exists.
  void release_pool() noexcept;
  // i32 [2] on this device: {DeviceErrorCode, offending value}; kernels that meet bad data write
  // it (first writer wins is not required: any one report is enough). Allocated before the first
  // op that may need it and before a capture starts.
  const Tensor& error_flag();

 private:
  friend class CachingAllocator;
  // What a workspace holds after a conv2d_forward: the input and kernel it was computed from (a
  // backend may keep both: CUDA's implicit convolution keeps x in NHWC and the flipped kernel).
  struct WorkspaceClaim {
    DeviceMemory workspace, input, weights;
    size_t workspace_bytes = 0, input_bytes = 0, weights_bytes = 0;
    Conv2dShape shape;
  };
  // Forgets the claims whose workspace, input or kernel overlaps [memory, memory + bytes).
  void invalidate_claims(DeviceMemory memory, size_t bytes);
  void invalidate_claims(const Tensor& written);
  // Turns a raised error flag into a BackendError (and clears it).
  void check_error_flag();
  // batchnorm_forward (residual undefined) and batchnorm_add_forward: checks, then the slot.
  void batchnorm_front(const char* op, const BatchNormShape& s, bool training, const Tensor& x,
                       const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                       const Tensor& save_mean, const Tensor& save_invstd);
  // The shape the conv2d slots see: s, or s in float32 when s.dtype is staged.
  Conv2dShape conv_compute_shape(const Conv2dShape& s) const;

  std::unique_ptr<CachingAllocator> allocator_;
  Tensor error_flag_;
  // The scratch arena: blocks kept for the device's life (a captured step may refer to any).
  std::vector<Tensor> scratch_blocks_;
  size_t scratch_used_ = 0;  // bytes handed out, across blocks in order
  bool capturing_ = false;
  bool beside_ = false;          // queue_beside's work is being queued
  bool beside_pending_ = false;  // side work queued since the last join
  std::mutex claims_mutex_;
  std::vector<WorkspaceClaim> claims_;
};

}  // namespace trident
