// The watchdog of an NCCL collective, a thread of its own as NCCL users run one (PyTorch's
// ProcessGroupNCCL): it polls the communicators' asynchronous errors, and markers (events
// recorded on every compute stream after a step's work) that must each finish within
// TRIDENT_COLLECTIVE_TIMEOUT_S of the previous one; a host call into NCCL may not block longer
// either. On a failure it aborts the communicators, where it can, and reports it
// (report_collective_failure: the process ends, and the launcher ends the job).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trident/backends/cuda/cuda_device.h"

namespace trident {

class NcclWatchdog {
 public:
  // comms[i] belongs to devices[i]; `who` names this process's ranks ("ranks 2-3 of 8 on
  // cuda:0,cuda:1"); `try_abort` aborts the communicators unless a host call into NCCL holds
  // them, and returns whether it did.
  NcclWatchdog(std::vector<cuda::CudaDevice*> devices, std::vector<ncclComm_t> comms,
               std::string who, double timeout_s, std::function<bool()> try_abort);
  ~NcclWatchdog();  // stops and joins the thread
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  void set_step(int64_t step) { step_ = step; }
  // A marker after everything queued so far on the compute streams; skipped while a stream is
  // being captured (the marker would be recorded into the graph); with many unfinished ones
  // pending, the newest is moved forward instead.
  void mark();
  // Around each host call into NCCL: one blocked past the timeout is a failure too.
  void enter_nccl();
  void leave_nccl();
  // Stops polling the communicators (before they are aborted or destroyed); markers and host
  // calls are still watched.
  void forget_communicators();
  // The failure the watchdog found, or empty.
  std::string failure() const;

 private:
  struct Marker {
    std::vector<cudaEvent_t> events;  // one per device
    std::chrono::steady_clock::time_point queued;
  };
  void watch();
  std::string check(std::chrono::steady_clock::time_point now);  // a failure, or empty
  std::string reap_finished(std::chrono::steady_clock::time_point now);
  std::string describe(const std::string& problem) const;

  std::vector<cuda::CudaDevice*> devices_;
  std::vector<ncclComm_t> comms_;
  const std::string who_;
  const double timeout_s_;
  std::function<bool()> try_abort_;
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> in_nccl_since_ns_{0};  // steady-clock time of the host call; 0: none

  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable wake_;
  bool stop_ = false, watch_comms_ = true;
  std::deque<Marker> markers_;
  std::vector<std::vector<cudaEvent_t>> spare_events_;
  std::chrono::steady_clock::time_point last_progress_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace trident
