// Collectives across the devices that train one model together: the sum of one buffer per device,
// left in every device's buffer. NCCL implements it for CUDA GPUs (backends/cuda), MPI across
// processes (core/mpi), and the host-staged fallback here works for any set of devices.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/error.h"

namespace trident {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string name() const = 0;  // "nccl", "host", "mpi+host" ...
  // buffers[i] (count floats on devices[i]) = sum over i of buffers[i]. Queued after all work
  // already queued on each device; may return before it has run on GPU devices.
  virtual void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) = 0;
  // True when all_reduce_sum can be recorded inside Device::capture (NCCL can; host staging can't).
  virtual bool capturable() const { return false; }

  // Bucketed use, to overlap the sums with the rest of backward. start_all_reduce_sum queues the
  // sum of one range (a bucket of finished gradients) after the work already queued on each
  // device and returns at once where it can; finish_all_reduces makes every device's later work
  // wait for all the sums started so far. Between the two, the caller may queue more work that
  // does not touch the started ranges. Here (the default) a start is simply the whole sum.
  virtual void start_all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) {
    all_reduce_sum(buffers, count);
  }
  virtual void finish_all_reduces() {}
  // True when a started sum really runs beside later work (NCCL's communication stream), so that
  // the trainer gains from starting buckets during backward; false where it would only add
  // host round trips (host staging).
  virtual bool overlaps() const { return false; }

  // Per-device use, for one thread per device: the thread of local device i queues device i's
  // part of the sum of buffer (count floats), after the work already queued on that device; the
  // sum completes once every device's part is queued (in any order). Capturable inside that
  // device's own captured step where capturable(). Default: not supported.
  virtual bool per_device() const { return false; }
  virtual void all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) {
    (void)index;
    (void)buffer;
    (void)count;
    throw Error(name() + ": no per-device sums (use all_reduce_sum from one thread)");
  }
  // Per-device use in buckets (where overlaps()): the thread of device i starts device i's
  // part of the sum of one range and returns at once where it can; finish_all_reduces_device(i)
  // makes device i's later work wait for every sum it started. Every device's thread starts the
  // same ranges in the same order. Here (the default) a start is the whole per-device sum.
  virtual void start_all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) {
    all_reduce_sum_device(index, buffer, count);
  }
  virtual void finish_all_reduces_device(size_t index) { (void)index; }

  // The training step (1-based, counted over the whole run) whose work is queued next. Messages
  // of a timeout name it; a collective that queues work on devices (NCCL) also marks here the
  // end of everything queued so far, which its watchdog waits for. Default: nothing.
  virtual void begin_step(int64_t step) { (void)step; }
  // Gives up every operation started and not finished, without waiting for the other ranks
  // (ncclCommAbort): called on error paths, before the captured steps and the collective are
  // destroyed, since peers may never match what is queued and a finalize would wait for them
  // forever. Later sums throw. Idempotent; the default (nothing pending between calls) is empty.
  virtual void abort() {}
  // Throws the failure found since the last call, if any: a watchdog that gave up on the other
  // ranks aborts the communicators, which lets this process's host waits return with whatever
  // the aborted sums left in the buffers. Called after the host reads results (an epoch's
  // losses, the test set's), so that those are never reported. Default: failures are thrown
  // where they happen, nothing is left to find.
  virtual void throw_if_failed() const {}
};

// A collective that waited longer than TRIDENT_COLLECTIVE_TIMEOUT_S for the other ranks; the
// message names the timeout, this rank and the step.
class CollectiveTimeout : public BackendError { using BackendError::BackendError; };

// TRIDENT_COLLECTIVE_TIMEOUT_S: how long a collective may wait for the other ranks before the
// job is ended, in seconds; 0 waits forever. The default, 600 s (PyTorch's default process-group
// timeout too), outlasts the longest legitimate wait between two matched collectives: the leader
// evaluating the test set and writing a checkpoint while the others wait in the next step's sum,
// and first-use costs (OpenCL program builds, CUDA graph capture, NCCL connection setup); it
// still frees a job whose peer died within minutes rather than never.
double collective_timeout_seconds();
// " (TRIDENT_COLLECTIVE_TIMEOUT_S=5)": for messages.
std::string collective_timeout_text(double seconds);

// What a collective's watchdog thread does once it has found a hung or failed collective and
// aborted it: the default prints `message` and ends the process at once (exit status 1), which
// an MPI launcher turns into the end of the whole job. Tests replace it to observe the failure.
using CollectiveFailureHandler = std::function<void(const std::string& message)>;
void set_collective_failure_handler(CollectiveFailureHandler handler);  // empty: the default
void report_collective_failure(const std::string& message);

// Guards a blocking call that nothing can interrupt (a communicator's init or finalize, which
// wait for every rank): unless destroyed within `timeout_s` (0: no limit), a thread of its own
// calls report_collective_failure(message), which ends the process.
class CollectiveDeadline {
 public:
  CollectiveDeadline(double timeout_s, std::string message);
  ~CollectiveDeadline();  // the call returned in time: nothing is reported
  CollectiveDeadline(const CollectiveDeadline&) = delete;
  CollectiveDeadline& operator=(const CollectiveDeadline&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Copies every buffer to the host, sums in float, copies the sum back. Any devices, any backend.
std::unique_ptr<Collective> make_host_staged_collective(const std::vector<Device*>& devices);

// A factory a backend may register for sets made only of its devices (NCCL for CUDA).
using CollectiveFactory =
    std::unique_ptr<Collective> (*)(const std::vector<Device*>& devices);
void register_collective_factory(const std::string& backend, CollectiveFactory factory);
// The best collective for these devices: a backend's own when all devices share it and it
// registered one, else host staging. A single device gets a collective that does nothing.
std::unique_ptr<Collective> make_collective(const std::vector<Device*>& devices);

// The same for a job of several processes (core/mpi asks; the backend answers, so that core
// never includes a backend's header). `devices` are this process's, ranks first_rank,
// first_rank + 1, ... of total_ranks. `broadcast_from_first` replaces its argument, on every
// process, with the first process's bytes: the bootstrap of a communicator (NCCL's unique id).
// Every process calls the factory at the same time and each call broadcasts exactly once.
using BroadcastFromFirst = std::function<void(std::string& bytes)>;
using ProcessCollectiveFactory = std::unique_ptr<Collective> (*)(
    const std::vector<Device*>& devices, const BroadcastFromFirst& broadcast_from_first,
    int first_rank, int total_ranks);
void register_process_collective_factory(const std::string& backend,
                                         ProcessCollectiveFactory factory);
// The factory registered for `backend`, or nullptr.
ProcessCollectiveFactory find_process_collective_factory(const std::string& backend);

// What the processes of a job can do together (core/mpi gives MPI's), enough to choose their
// collective: element-wise minima over every process, and the bootstrap broadcast.
struct ProcessChannel {
  int rank = 0, size = 1;  // this process, and how many there are
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> min_over_processes;
  BroadcastFromFirst broadcast_from_first;
};
// The collective over every process's devices, called by every process at once: the backend's
// own (its process factory) when every device of every process belongs to that one backend, it
// registered a factory and `use_backend_collective` holds everywhere; else `fallback(devices)`
// (host staging plus the processes' sum). Every process must train on as many devices.
std::unique_ptr<Collective> make_process_collective(
    const std::vector<Device*>& devices, const ProcessChannel& channel,
    bool use_backend_collective,
    const std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)>& fallback);

}  // namespace trident
