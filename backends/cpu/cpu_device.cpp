// CpuDevice: host allocations and the op table, each op forwarded to kernels/cpu inside the arena.
#include "trident/backends/cpu/cpu_device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <oneapi/tbb/version.h>

#include "trident/core/error.h"
#include "trident/kernels/cpu/conv2d.h"
#include "trident/kernels/cpu/elementwise.h"
#include "trident/kernels/cpu/gather.h"
#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/optimizers.h"
#include "trident/kernels/cpu/pool2d.h"
#include "trident/kernels/cpu/reduce.h"
#include "trident/kernels/cpu/softmax_nll.h"

namespace trident {
namespace {

// The host address of a DeviceMemory (null stays null: optional operands).
template <class T = float>
T* at(DeviceMemory m) {
  if (!m.handle) return nullptr;
  return reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset);
}

uint64_t page_bytes(int which) {
  const long pages = sysconf(which), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? uint64_t(pages) * uint64_t(size) : 0;
}

cpu::BiasKind cpu_bias_kind(BiasKind kind) {
  switch (kind) {
    case BiasKind::per_column: return cpu::BiasKind::per_column;
    case BiasKind::per_row: return cpu::BiasKind::per_row;
    default: return cpu::BiasKind::none;
  }
}

}  // namespace

CpuDevice::CpuDevice(int index, int threads, const std::string& cpu_name)
    : threads_(threads), arena_(threads) {
  info_.backend = "cpu";
  info_.index = index;
  info_.name = cpu_name + " (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  info_.vendor = "host";
  info_.type = "cpu";
  info_.driver = "oneTBB " + std::to_string(TBB_VERSION_MAJOR) + "." +
                 std::to_string(TBB_VERSION_MINOR);
  info_.detail = std::string("sgemm kernel ") + cpu::sgemm_kernel_name();
  info_.memory_bytes = page_bytes(_SC_PHYS_PAGES);
  info_.compute_units = threads;
}

CpuDevice::~CpuDevice() { release_pool(); }

void* CpuDevice::raw_allocate(size_t bytes) {
  constexpr size_t kAlign = 64;  // a cache line, and a full AVX-512 vector
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p)
    throw OutOfMemory(info_.id() + ": cannot allocate " + std::to_string(bytes) +
                      " bytes of host memory (" + std::to_string(page_bytes(_SC_AVPHYS_PAGES)) +
                      " bytes available); use a smaller batch or model");
  return p;
}

void CpuDevice::raw_free(void* handle) noexcept { std::free(handle); }

void CpuDevice::copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  run([&] { cpu::copy_bytes(at<char>(dst), host, bytes); });
}

void CpuDevice::copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  run([&] { cpu::copy_bytes(host, at<char>(src), bytes); });
}

void CpuDevice::copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  run([&] { cpu::copy_bytes(at<char>(dst), at<char>(src), bytes); });
}

void CpuDevice::fill(DeviceMemory dst, int64_t count, float value) {
  run([&] { cpu::fill(at(dst), count, value); });
}

void CpuDevice::gemm(const GemmArgs& g) {
  run([&] {
    cpu::sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, at(g.a), g.lda, at(g.b), g.ldb,
               g.beta, at(g.c), g.ldc,
               cpu::GemmEpilogue{at(g.bias), g.bias.handle ? cpu_bias_kind(g.bias_kind)
                                                           : cpu::BiasKind::none,
                                 g.relu});
  });
}

void CpuDevice::sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db,
                         float beta) {
  run([&] { cpu::sum_rows(at(dy), rows, cols, at(db), beta); });
}

void CpuDevice::axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) {
  run([&] { cpu::axpby(at(x), at(y), n, a, b); });
}

void CpuDevice::relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) {
  run([&] { cpu::relu_forward(at(x), at(y), n); });
}

void CpuDevice::relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) {
  run([&] { cpu::relu_backward(at(y), at(dy), at(dx), n); });
}

void CpuDevice::dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group,
                        int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                        DeviceMemory step_state) {
  run([&] {
    cpu::dropout(at(x), at(y), n, group, group_offset, p, seed, stream,
                 at<uint32_t>(step_state)[1]);
  });
}

size_t CpuDevice::conv2d_workspace_bytes(const Conv2dShape& s) const {
  return cpu::conv2d_workspace_bytes(s, threads_);
}

void CpuDevice::conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                               DeviceMemory b, DeviceMemory y, DeviceMemory workspace) {
  run([&] { cpu::conv2d_forward(s, at(x), at(w), at(b), at(y), at<void>(workspace), threads_); });
}

void CpuDevice::conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                                DeviceMemory dy, DeviceMemory dx, DeviceMemory dw,
                                DeviceMemory db, DeviceMemory workspace, bool) {
  // The CPU convolution works through the batch in cache-sized chunks: nothing to reuse.
  run([&] {
    cpu::conv2d_backward(s, at(x), at(w), at(dy), at(dx), at(dw), at(db), at<void>(workspace),
                         threads_);
  });
}

void CpuDevice::maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                                  DeviceMemory argmax) {
  run([&] { cpu::maxpool2d_forward(s, at(x), at(y), at<int32_t>(argmax)); });
}

void CpuDevice::maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                                   DeviceMemory dx) {
  run([&] { cpu::maxpool2d_backward(s, at(dy), at<int32_t>(argmax), at(dx)); });
}

void CpuDevice::log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows, int64_t cols) {
  run([&] { cpu::log_softmax_forward(at(x), at(y), rows, cols); });
}

void CpuDevice::log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx,
                                     int64_t rows, int64_t cols) {
  run([&] { cpu::log_softmax_backward(at(y), at(dy), at(dx), rows, cols); });
}

void CpuDevice::nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows,
                                 int64_t cols, DeviceMemory loss, bool accumulate) {
  run([&] { cpu::nll_loss_forward(at(logp), at<int32_t>(labels), rows, cols, at(loss), accumulate); });
}

void CpuDevice::nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols, float scale,
                                  DeviceMemory dlogp) {
  run([&] { cpu::nll_loss_backward(at<int32_t>(labels), rows, cols, scale, at(dlogp)); });
}

void CpuDevice::log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows, int64_t cols,
                                float grad_scale, DeviceMemory y, DeviceMemory loss,
                                bool accumulate, DeviceMemory dx) {
  run([&] {
    cpu::log_softmax_nll(at(x), at<int32_t>(labels), rows, cols, grad_scale, at(y), at(loss),
                         accumulate, at(dx));
  });
}

void CpuDevice::count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows,
                              int64_t cols, DeviceMemory correct) {
  run([&] { cpu::count_correct(at(scores), at<int32_t>(labels), rows, cols, at(correct)); });
}

void CpuDevice::gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table, int64_t rows,
                            DeviceMemory step_state, DeviceMemory dst) {
  run([&] {
    cpu::gather_rows(at<void>(src), row_bytes, at<int32_t>(table), rows,
                     at<uint32_t>(step_state)[0], at<void>(dst));
  });
}

void CpuDevice::advance_step(DeviceMemory step_state) {
  cpu::advance_step(at<uint32_t>(step_state));
}

void CpuDevice::sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum,
                           int64_t n, const SgdParams& hp) {
  run([&] { cpu::sgd_update(at(params), at(grads), at(momentum), n, hp); });
}

void CpuDevice::adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m,
                            DeviceMemory v, int64_t n, const AdamParams& hp,
                            DeviceMemory step_state) {
  run([&] {
    cpu::adam_update(at(params), at(grads), at(m), at(v), n, hp, at<uint32_t>(step_state)[1]);
  });
}

}  // namespace trident
