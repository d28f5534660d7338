// Test doubles for the teardown order of data parallelism: a CPU device whose capture() keeps a
// recording, as a CUDA graph does, and a collective that, like an NCCL communicator, is held by
// every recording that contains one of its sums. The collective writes down what its destruction
// would have met on GPUs: recordings still holding it (NCCL's finalize waits for them forever),
// or peers that will never come while it was not aborted (the finalize waits for them too).
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/collective.h"

namespace trident::testing {

// What a TeardownCheckingCollective saw, kept by the test beyond the collective's life.
struct TeardownReport {
  int sums = 0;                 // sums asked for (all_reduce_sum and start_all_reduce_sum)
  int recorded_sums = 0;        // of those, made while a step was being captured
  bool peers_gone = false;      // set by a test: the other ranks failed and will match nothing
  bool aborted = false;
  bool destroyed = false;
  // Set by a test: what a watchdog thread found meanwhile (it aborted the communicators, so the
  // host's waits returned over garbage); throw_if_failed() throws it.
  std::string watchdog_failure;
  long recordings_alive_at_destruction = -1;
  // Where NCCL's ncclCommFinalize would have waited forever.
  bool finalize_would_hang() const {
    return recordings_alive_at_destruction > 0 || (peers_gone && !aborted);
  }
};

// A recorded step: the CPU ran its work at once while it was captured; a replay repeats nothing
// (these tests check the order of teardown, not arithmetic). It keeps every `hold` token alive,
// as a CUDA graph keeps a reference to each communicator it recorded a collective of.
class FakeRecording : public CapturedWork {
 public:
  void replay() override { ++replays; }
  void hold(std::shared_ptr<const void> token) { held_.push_back(std::move(token)); }
  int replays = 0;

 private:
  std::vector<std::shared_ptr<const void>> held_;
};

// A CPU device that can capture: capture() runs the step once, with recording() set meanwhile.
class CapturingCpuDevice : public CpuDevice {
 public:
  explicit CapturingCpuDevice(int index) : CpuDevice(index, 1, "CPU that captures (test)") {}
  FakeRecording* recording() const { return recording_; }
  int captures = 0;

 protected:
  std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step) override {
    auto recording = std::make_unique<FakeRecording>();
    recording_ = recording.get();
    try {
      step();
    } catch (...) {
      recording_ = nullptr;
      throw;
    }
    recording_ = nullptr;
    ++captures;
    return recording;
  }

 private:
  FakeRecording* recording_ = nullptr;
};

// Sums over this process's devices, times `processes`: the other processes are mirrors of this
// one, holding the same buffers. Capturable, like NCCL; reports into `report`.
class TeardownCheckingCollective : public Collective {
 public:
  TeardownCheckingCollective(std::vector<Device*> devices, int processes, TeardownReport& report)
      : devices_(std::move(devices)), processes_(processes), report_(report),
        token_(std::make_shared<int>(0)) {}
  ~TeardownCheckingCollective() override {
    report_.recordings_alive_at_destruction = token_.use_count() - 1;
    report_.destroyed = true;
  }
  std::string name() const override { return "teardown-checking"; }
  bool capturable() const override { return true; }
  void abort() override { report_.aborted = true; }
  void throw_if_failed() const override {
    if (!report_.watchdog_failure.empty()) throw CollectiveTimeout(report_.watchdog_failure);
  }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    if (report_.aborted) throw std::logic_error("a sum after abort()");
    ++report_.sums;
    for (Device* d : devices_)
      if (auto* capturing = dynamic_cast<CapturingCpuDevice*>(d))
        if (FakeRecording* recording = capturing->recording()) {
          recording->hold(token_);
          ++report_.recorded_sums;
        }
    const size_t n = static_cast<size_t>(count);
    std::vector<float> sum(n, 0.0f), part(n);
    for (size_t d = 0; d < devices_.size(); ++d) {
      devices_[d]->copy_to_host(part.data(), buffers[d], n * sizeof(float));
      for (size_t k = 0; k < n; ++k) sum[k] += part[k] * static_cast<float>(processes_);
    }
    for (size_t d = 0; d < devices_.size(); ++d)
      devices_[d]->copy_from_host(buffers[d], sum.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  int processes_;
  TeardownReport& report_;
  std::shared_ptr<int> token_;  // one reference per recording that holds this collective
};

// A CPU device whose capture records the step and whose replay runs it again, as a graph
// replays the same work: captured training then computes what eager training does.
class ReplayingCpuDevice : public CpuDevice {
 public:
  explicit ReplayingCpuDevice(int index) : CpuDevice(index, 1, "CPU that replays (test)") {}
  int captures = 0;
  std::shared_ptr<int> replays = std::make_shared<int>(0);

 protected:
  std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step) override {
    struct Replay : CapturedWork {
      std::function<void()> step;
      std::shared_ptr<int> count;
      void replay() override {
        step();
        ++*count;
      }
    };
    auto replay = std::make_unique<Replay>();
    replay->step = step;
    replay->count = replays;
    ++captures;
    return replay;
  }
};

// A per-device collective, as NCCL is with one thread per GPU: each device's thread hands in
// its buffer, all of them wait for the last, each takes the sum. Capturable: the sum is part of
// a replayed step.
class PerDeviceCollective : public Collective {
 public:
  explicit PerDeviceCollective(std::vector<Device*> devices)
      : devices_(std::move(devices)), parts_(devices_.size()) {}
  std::string name() const override { return "per-device (test)"; }
  bool capturable() const override { return true; }
  bool per_device() const override { return true; }
  // overlapping: claim to overlap, as NCCL does, so that the trainer starts sums in buckets.
  bool overlapping = false;
  bool overlaps() const override { return overlapping; }
  int per_device_calls = 0;  // parts of sums handed in, over all devices
  std::atomic<int> finishes{0};
  void finish_all_reduces_device(size_t) override { ++finishes; }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    const size_t n = static_cast<size_t>(count);
    std::vector<float> sum(n, 0.0f), part(n);
    for (size_t d = 0; d < devices_.size(); ++d) {
      devices_[d]->copy_to_host(part.data(), buffers[d], n * sizeof(float));
      for (size_t k = 0; k < n; ++k) sum[k] += part[k];
    }
    for (size_t d = 0; d < devices_.size(); ++d)
      devices_[d]->copy_from_host(buffers[d], sum.data(), n * sizeof(float));
  }

  void all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) override {
    const size_t n = static_cast<size_t>(count);
    std::vector<float> mine(n);
    devices_[index]->copy_to_host(mine.data(), buffer, n * sizeof(float));
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t round = round_;
    parts_[index] = std::move(mine);
    ++per_device_calls;
    if (++arrived_ == devices_.size()) {  // the last one sums for everyone
      sum_.assign(n, 0.0f);
      for (const auto& p : parts_)
        for (size_t k = 0; k < n; ++k) sum_[k] += p[k];
      arrived_ = 0;
      ++round_;
      all_in_.notify_all();
    } else {
      all_in_.wait(lock, [&] { return round_ != round; });
    }
    const std::vector<float> sum = sum_;
    lock.unlock();
    devices_[index]->copy_from_host(buffer, sum.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  std::vector<std::vector<float>> parts_;
  std::vector<float> sum_;
  std::mutex mutex_;
  std::condition_variable all_in_;
  size_t arrived_ = 0;
  uint64_t round_ = 0;
};

}  // namespace trident::testing
