// The oneTBB CPU device: host memory, ops run at once on the calling thread inside the device's
// own tbb::task_arena, so several CPU "devices" (TRIDENT_CPU_DEVICES) split the cores between them.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <string>
#include <vector>

#include "trident/core/device.h"

namespace trident {

class CpuDevice final : public Device {
 public:
  // `threads` worker slots in this device's arena; `index` its position in the cpu backend.
  CpuDevice(int index, int threads, const std::string& cpu_name);
  ~CpuDevice() override;

  const DeviceInfo& info() const override { return info_; }
  int threads() const { return threads_; }

  void* raw_allocate(size_t bytes) override;
  void raw_free(void* handle) noexcept override;
  void copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void fill(DeviceMemory dst, int64_t count, float value) override;
  void synchronize() override {}  // every op has finished when it returns

  void gemm(const GemmArgs& args) override;
  void sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db,
                float beta) override;
  void axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) override;

  void relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) override;
  void relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) override;
  void dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group, int64_t group_offset,
               float p, uint64_t seed, uint32_t stream, DeviceMemory step_state) override;

  size_t conv2d_workspace_bytes(const Conv2dShape& s) const override;
  void conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w, DeviceMemory b,
                      DeviceMemory y, DeviceMemory workspace) override;
  void conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w, DeviceMemory dy,
                       DeviceMemory dx, DeviceMemory dw, DeviceMemory db,
                       DeviceMemory workspace,
                       bool after_forward) override;
  void maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                         DeviceMemory argmax) override;
  void maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                          DeviceMemory dx) override;

  void log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows, int64_t cols) override;
  void log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t rows,
                            int64_t cols) override;
  void nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows, int64_t cols,
                        DeviceMemory loss, bool accumulate) override;
  void nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols, float scale,
                         DeviceMemory dlogp) override;
  void log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows, int64_t cols,
                       float grad_scale, DeviceMemory y, DeviceMemory loss, bool accumulate,
                       DeviceMemory dx) override;
  void count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows, int64_t cols,
                     DeviceMemory correct) override;

  void gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table, int64_t rows,
                   DeviceMemory step_state, DeviceMemory dst) override;
  void advance_step(DeviceMemory step_state) override;
  void sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum, int64_t n,
                  const SgdParams& hp) override;
  void adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m, DeviceMemory v,
                   int64_t n, const AdamParams& hp, DeviceMemory step_state) override;

 private:
  // Runs f inside this device's arena, so the kernels' tbb::parallel_for use its threads only.
  template <class F>
  void run(const F& f) {
    arena_.execute(f);
  }

  DeviceInfo info_;
  int threads_;
  tbb::task_arena arena_;
};

// How many CPU devices to expose and the threads of each: TRIDENT_CPU_DEVICES (default 1) splits
// TRIDENT_NUM_THREADS (default: the hardware threads this process may use) between them.
struct CpuSplit {
  int devices = 1;
  std::vector<int> threads;
};
CpuSplit cpu_device_split();

}  // namespace trident
