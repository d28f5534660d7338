// The backend-abstract device interface: memory, ordering, and the table of ops the models use.
//
// A backend implements one class derived from Device. Every op is queued in order on the device's
// single stream / queue and may return before it has run; only copy_to_host and synchronize wait.
// Shapes are row-major and given in elements; DeviceMemory offsets are in bytes. Unless an op says
// otherwise its buffers are float32, outputs are overwritten (never accumulated into), and an output
// may not alias an input. Gradients are overwritten by every backward op, so no zeroing is needed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trident/core/dtype.h"

namespace trident {

class CachingAllocator;

// A place in device memory: the backend's opaque handle (a pointer on CPU and CUDA, a cl_mem on
// OpenCL) plus a byte offset, so that sub-ranges of one buffer need no extra driver objects.
struct DeviceMemory {
  void* handle = nullptr;
  size_t offset = 0;
  DeviceMemory at(size_t extra_bytes) const { return {handle, offset + extra_bytes}; }
  explicit operator bool() const { return handle != nullptr; }
};

struct DeviceInfo {
  std::string backend;         // "cpu", "cuda", "opencl"
  int index = 0;               // position within its backend
  std::string name;            // "NVIDIA H100 80GB HBM3", "AMD EPYC 9R14 (2 threads)"
  std::string vendor;
  std::string type;            // "gpu", "cpu", "accelerator"
  std::string driver;          // driver / runtime version
  std::string detail;          // backend-specific: compute capability, OpenCL version, ISA ...
  uint64_t memory_bytes = 0;
  int compute_units = 0;       // SMs, OpenCL compute units, CPU threads
  std::string id() const { return backend + ":" + std::to_string(index); }
};

enum class BiasKind : uint8_t { none, per_column, per_row };

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C, then + bias (per column: bias[N], per row:
// bias[M]), then ReLU if relu. op(A) is [M,K] (stored [K,M] if trans_a); op(B) is [K,N] (stored
// [N,K] if trans_b). lda/ldb/ldc are the stored row strides. beta == 0 means C is not read.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  DeviceMemory a, b, c;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DeviceMemory bias;                 // null handle: no bias
  BiasKind bias_kind = BiasKind::none;
  bool relu = false;
};

// NCHW convolution, square stride and zero padding; weights [out_c, in_c, kh, kw], bias [out_c].
struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, stride = 1, padding = 0;
  int64_t out_height() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel_w) / stride + 1; }
};

// NCHW max pooling without padding; windows that run past the edge are dropped (floor), as in PyTorch.
// relu: a ReLU after the pooling, fused: y = max(window max, 0), and argmax = -1 where that is
// not > 0 (the ReLU passes no gradient there, so maxpool2d_backward sends none back).
struct Pool2dShape {
  int64_t batch = 0, channels = 0, height = 0, width = 0, kernel = 2, stride = 2;
  bool relu = false;
  int64_t out_height() const { return (height - kernel) / stride + 1; }
  int64_t out_width() const { return (width - kernel) / stride + 1; }
};

// PyTorch's SGD: d = g*grad_scale + weight_decay*p; buf = momentum*buf + d (buf starts at 0);
// d = nesterov ? d + momentum*buf : buf (momentum > 0); p -= lr * d.
struct SgdParams {
  float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f, grad_scale = 1.0f;
  bool nesterov = false;
};

// PyTorch's Adam (L2 weight decay): g = grad*grad_scale + wd*p; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), with
// t = step_state.global_step + 1 read on the device.
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f,
        grad_scale = 1.0f;
};

// Per-step scalars kept on the device, so that a captured step replays with fresh values: a
// buffer of two uint32, [0] = batch position in the epoch's index table, [1] = optimizer steps
// done so far (dropout counters, Adam's t). advance_step increments both.
constexpr size_t kStepStateBytes = 2 * sizeof(uint32_t);

// A recorded sequence of queued work that can be run again without the host re-issuing it.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;
};

class Device {
 public:
  Device();
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const = 0;

  // ---- memory --------------------------------------------------------------------------------
  // The caching pool every Tensor allocates from (core; built on raw_allocate / raw_free).
  CachingAllocator& allocator();
  // Required. A fresh device allocation; throws OutOfMemory naming requested and free bytes.
  virtual void* raw_allocate(size_t bytes) = 0;
  // Required. Returns an allocation; ordered after all work queued so far that uses it.
  virtual void raw_free(void* handle) noexcept = 0;
  // Required. Host to device; `host` may be reused as soon as this returns.
  virtual void copy_from_host(DeviceMemory dst, const void* host, size_t bytes) = 0;
  // Required. Device to host; waits for all queued work first.
  virtual void copy_to_host(void* host, DeviceMemory src, size_t bytes) = 0;
  // Required. Within this device, queued in order. Regions must not overlap.
  virtual void copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) = 0;
  // Required. dst[0..count) = value as float32 (0.0f also zeroes int32 buffers).
  virtual void fill(DeviceMemory dst, int64_t count, float value) = 0;
  // Required. Waits until all queued work has finished; rethrows a failure it met.
  virtual void synchronize() = 0;

  // ---- capture (optional) --------------------------------------------------------------------
  // Records the work `step` queues and returns it for replay, or nullptr where the backend cannot
  // capture (default): callers then simply call `step` every time. `step` must not allocate or
  // free device memory, nor read values back.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& step) {
    (void)step;
    return nullptr;
  }

  // ---- linear algebra ------------------------------------------------------------------------
  virtual void gemm(const GemmArgs& args) = 0;
  // db[cols] = beta * db + sum over rows of dy[rows, cols] (the bias gradient of a Linear layer);
  // beta == 0 means db is not read (as C in gemm).
  virtual void sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db,
                        float beta) = 0;
  // y = a * x + b * y over n floats (gradient averaging, loss accumulation, weight averaging).
  virtual void axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) = 0;

  // ---- elementwise ---------------------------------------------------------------------------
  // y = max(x, 0); y may alias x.
  virtual void relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) = 0;
  // dx = dy where y > 0 else 0 (y is the forward output); dx may alias dy.
  virtual void relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) = 0;
  // Inverted dropout: y[i] = keep(g) ? x[i] / (1 - p) : 0 with g = group_offset + i / group.
  // keep(g) = philox_uniform(seed, stream, step_state[1], g) >= p (core/philox.h defines it
  // bit for bit). group = 1 is Dropout, group = H*W is Dropout2d (one draw per channel). The
  // backward pass is the same call on dy. y may alias x.
  virtual void dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group,
                       int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                       DeviceMemory step_state) = 0;

  // ---- convolution and pooling ---------------------------------------------------------------
  // Bytes of scratch conv2d_forward / conv2d_backward need for this shape (im2col buffers ...).
  virtual size_t conv2d_workspace_bytes(const Conv2dShape& s) const = 0;
  // y[N, OC, OH, OW] = conv(x[N, C, H, W], w) + b.
  virtual void conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                              DeviceMemory b, DeviceMemory y, DeviceMemory workspace) = 0;
  // dw, db (and dx unless its handle is null: the first layer needs no input gradient).
  // after_forward: `workspace` is as conv2d_forward left it for this same s, x and w (nothing
  // has written it since), so a backend may reuse what it put there (the im2col columns)
  // instead of recomputing it; false: its contents are unknown.
  virtual void conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                               DeviceMemory dy, DeviceMemory dx, DeviceMemory dw,
                               DeviceMemory db, DeviceMemory workspace, bool after_forward) = 0;
  // y[N, C, OH, OW] = window max; argmax (int32, same shape) = flat h*W+w index of the max in x's plane.
  virtual void maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                                 DeviceMemory argmax) = 0;
  // dx[N, C, H, W] = dy scattered to the argmax positions (zero elsewhere; overlaps add; an
  // argmax of -1 sends nothing).
  virtual void maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                                  DeviceMemory dx) = 0;

  // ---- classification head -------------------------------------------------------------------
  // y[r, :] = x[r, :] - logsumexp(x[r, :]) over rows x cols.
  virtual void log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows,
                                   int64_t cols) = 0;
  // dx = dy - exp(y) * sum(dy[r, :]) (y is the forward output).
  virtual void log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx,
                                    int64_t rows, int64_t cols) = 0;
  // loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -logp[r, labels[r]]; labels int32.
  virtual void nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows,
                                int64_t cols, DeviceMemory loss, bool accumulate) = 0;
  // dlogp[r, c] = (c == labels[r]) ? -scale : 0 (scale = 1/rows for the mean loss).
  virtual void nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols, float scale,
                                 DeviceMemory dlogp) = 0;
  // A training step's classification head in one op (log_softmax_forward, nll_loss_forward,
  // nll_loss_backward and log_softmax_backward in one pass): y = log_softmax(x);
  // loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -y[r, labels[r]];
  // dx[r, c] = grad_scale * (exp(y[r, c]) - (c == labels[r])), the gradient of the NLL summed
  // over rows times grad_scale (1/rows: of the mean) with respect to x. labels int32.
  virtual void log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows, int64_t cols,
                               float grad_scale, DeviceMemory y, DeviceMemory loss,
                               bool accumulate, DeviceMemory dx) = 0;
  // correct[0] += number of rows whose first maximal score is at labels[r] (float32 count).
  virtual void count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows,
                             int64_t cols, DeviceMemory correct) = 0;

  // ---- data and optimizer --------------------------------------------------------------------
  // dst[i, :] = src[table[step_state[0] * rows + i], :] for i < rows; rows of row_bytes bytes of
  // any dtype; table is int32. Only batch indices travel per step; the data set stays resident.
  virtual void gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table, int64_t rows,
                           DeviceMemory step_state, DeviceMemory dst) = 0;
  // step_state[0] += 1, step_state[1] += 1.
  virtual void advance_step(DeviceMemory step_state) = 0;
  // One launch over a whole flat parameter buffer of n floats (see SgdParams).
  virtual void sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum,
                          int64_t n, const SgdParams& hp) = 0;
  // One launch over a whole flat parameter buffer of n floats (see AdamParams).
  virtual void adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m,
                           DeviceMemory v, int64_t n, const AdamParams& hp,
                           DeviceMemory step_state) = 0;

 protected:
  // Derived destructors call this first: it hands cached blocks back through raw_free while the
  // derived object (and its driver context) still exists.
  void release_pool() noexcept;

 private:
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace trident
