// The NCCL all-reduce for CUDA devices: one communicator per device, the sum queued in place on
// each device's own stream, so it orders after backward and before the update with no host wait.
// A watchdog bounds every wait for the other ranks; error paths abort the communicators.
#include "trident/backends/cuda/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/backends/cuda/cuda_device.h"
#include "trident/backends/cuda/nccl_watchdog.h"
#include "trident/core/error.h"
#include "trident/core/log.h"

namespace trident {
namespace {

using cuda::CudaDevice;

std::string device_ids(const std::vector<CudaDevice*>& devices) {
  std::string ids;
  for (const CudaDevice* d : devices) ids += (ids.empty() ? "" : ",") + d->info().id();
  return ids;
}

// Every device a CudaDevice, else nothing (the caller falls back to host staging).
std::vector<CudaDevice*> as_cuda_devices(const std::vector<Device*>& devices) {
  std::vector<CudaDevice*> cuda;
  for (Device* d : devices) {
    auto* c = dynamic_cast<CudaDevice*>(d);
    if (!c) return {};
    cuda.push_back(c);
  }
  return cuda;
}

// ncclCommInitRank for several devices of one thread must be grouped, and each call made with
// its device current; the caller's current device is restored afterwards.
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() { saved_ok_ = cudaGetDevice(&saved_) == cudaSuccess; }
  ~CurrentDeviceGuard() {
    if (saved_ok_ && cudaSetDevice(saved_) != cudaSuccess)
      log_warning("could not restore CUDA device " + std::to_string(saved_) + " after NCCL init");
  }

 private:
  int saved_ = 0;
  bool saved_ok_ = false;
};

// ncclCommAbort for every communicator not yet null, once; on error paths and timeouts.
void abort_communicators(std::vector<ncclComm_t>& comms) {
  for (ncclComm_t& comm : comms)
    if (comm) {
      const ncclResult_t result = ncclCommAbort(comm);
      if (result != ncclSuccess)
        log_warning(std::string("ncclCommAbort failed: ") + ncclGetErrorString(result));
      comm = nullptr;
    }
}

class NcclCollective : public Collective {
 public:
  // comms[i] belongs to devices[i], rank first_rank + i of `ranks` (all processes).
  NcclCollective(std::vector<CudaDevice*> devices, std::vector<ncclComm_t> comms, int first_rank,
                 int ranks)
      : devices_(std::move(devices)), comms_(std::move(comms)), ranks_(ranks),
        names_(device_ids(devices_)), timeout_s_(collective_timeout_seconds()) {
    const int last = first_rank + static_cast<int>(devices_.size()) - 1;
    const std::string who = (first_rank == last ? "rank " + std::to_string(first_rank)
                                                : "ranks " + std::to_string(first_rank) + "-" +
                                                      std::to_string(last)) +
                            " of " + std::to_string(ranks) + " on " + names_;
    watchdog_ = std::make_unique<NcclWatchdog>(devices_, comms_, who, timeout_s_,
                                               [this] { return try_abort(); });
  }

  ~NcclCollective() override {
    // Finalizing waits until every rank's queued work is done, so one thread must finalize all
    // its communicators in one group (one after another would wait on the next forever); then
    // each is freed locally. The watchdog still watches, and a deadline bounds the wait. A
    // destructor cannot throw: failures are reported.
    auto report = [&](const char* call, ncclResult_t result) {
      if (result != ncclSuccess)
        log_warning(std::string(call) + " failed on " + names_ + ": " +
                    ncclGetErrorString(result));
    };
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (!aborted_) {
        CollectiveDeadline deadline(timeout_s_, "ncclCommFinalize on " + names_ +
                                                    " waited for the other ranks too long");
        report("ncclGroupStart", ncclGroupStart());
        for (ncclComm_t comm : comms_) report("ncclCommFinalize", ncclCommFinalize(comm));
        report("ncclGroupEnd", ncclGroupEnd());
      }
    }
    watchdog_->forget_communicators();
    watchdog_.reset();
    if (!aborted_)
      for (ncclComm_t comm : comms_) report("ncclCommDestroy", ncclCommDestroy(comm));
    auto report_cuda = [&](const char* call, cudaError_t result) {
      if (result != cudaSuccess)
        log_warning(std::string(call) + " failed on " + names_ + ": " +
                    cudaGetErrorString(result));
    };
    for (size_t i = 0; i < side_.size(); ++i) {  // released once idle; these calls do not wait
      report_cuda("cudaSetDevice", cudaSetDevice(devices_[i]->ordinal()));
      report_cuda("cudaStreamDestroy", cudaStreamDestroy(side_[i]));
      if (i < ready_.size()) report_cuda("cudaEventDestroy", cudaEventDestroy(ready_[i]));
      if (i < done_.size()) report_cuda("cudaEventDestroy", cudaEventDestroy(done_[i]));
    }
  }

  std::string name() const override {
    return ranks_ == static_cast<int>(devices_.size()) ? "nccl"
                                                        : "nccl (" + std::to_string(ranks_) + " ranks)";
  }
  bool capturable() const override { return true; }

  void begin_step(int64_t step) override {
    throw_if_failed();
    watchdog_->set_step(step);
    watchdog_->mark();  // the end of the previous step's work (a replayed graph included)
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    abort_locked();
  }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    check_buffers(buffers);
    std::vector<cudaStream_t> compute;
    for (CudaDevice* d : devices_) compute.push_back(d->stream());
    enqueue(buffers, count, compute);
    watchdog_->mark();  // outside capture: a sum the host may wait for (the epoch's loss)
  }

  // Per-device use: one thread per local GPU, each queuing its own device's part of the sum on
  // its communicator (NCCL needs no group when each device has its own thread), so that every
  // device's whole step, its part of the sum included, is one captured graph (issue 14). No
  // shared lock is held across the call: a thread waiting for another's call would deadlock.
  bool per_device() const override { return devices_.size() > 1; }
  void all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) override {
    check_index(index);
    if (count <= 0) return;
    devices_[index]->make_current();
    all_reduce_on(index, buffer, count, devices_[index]->stream());
  }
  // The same in buckets, each on device index's communication stream (no shared state between
  // the devices' threads but the streams, made once).
  void start_all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) override {
    check_index(index);
    if (count <= 0) return;
    std::call_once(side_streams_made_, [this] { create_side_streams(); });
    CudaDevice* d = devices_[index];
    d->make_current();
    TRIDENT_CUDA_CHECK(cudaEventRecord(ready_[index], d->stream()), d->ordinal());
    TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(side_[index], ready_[index], 0), d->ordinal());
    all_reduce_on(index, buffer, count, side_[index]);
    started_on_device_[index] = 1;
  }
  void finish_all_reduces_device(size_t index) override {
    check_index(index);
    if (!started_on_device_[index]) return;
    CudaDevice* d = devices_[index];
    d->make_current();
    TRIDENT_CUDA_CHECK(cudaEventRecord(done_[index], side_[index]), d->ordinal());
    TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(d->stream(), done_[index], 0), d->ordinal());
    started_on_device_[index] = 0;
  }

  // Bucketed use, to overlap the sum with the rest of backward. start_all_reduce_sum queues the
  // sum on each device's communication stream, after the work already queued on its compute
  // stream, and returns; finish_all_reduces makes each compute stream wait for every sum started
  // so far. Inside capture the event fork / join pulls the communication streams into the
  // recorded graph.
  bool overlaps() const override { return true; }
  void start_all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    check_buffers(buffers);
    if (count <= 0) return;
    std::call_once(side_streams_made_, [this] { create_side_streams(); });
    for (size_t i = 0; i < devices_.size(); ++i) {
      const int ordinal = devices_[i]->ordinal();
      devices_[i]->make_current();
      TRIDENT_CUDA_CHECK(cudaEventRecord(ready_[i], devices_[i]->stream()), ordinal);
      TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(side_[i], ready_[i], 0), ordinal);
    }
    enqueue(buffers, count, side_);
    started_ = true;
  }
  void finish_all_reduces() override {
    if (!started_) return;
    for (size_t i = 0; i < devices_.size(); ++i) {
      const int ordinal = devices_[i]->ordinal();
      devices_[i]->make_current();
      TRIDENT_CUDA_CHECK(cudaEventRecord(done_[i], side_[i]), ordinal);
      TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(devices_[i]->stream(), done_[i], 0), ordinal);
    }
    started_ = false;
    watchdog_->mark();
  }

  void throw_if_failed() const override {
    const std::string failure = watchdog_->failure();
    if (!failure.empty()) throw CollectiveTimeout(failure);
    if (aborted_) throw Error("NCCL on " + names_ + ": the communicators were aborted");
  }

 private:
  void check_index(size_t index) const {
    throw_if_failed();
    if (index >= devices_.size())
      throw Error("all_reduce_sum_device: no device " + std::to_string(index) + " in " + names_);
  }
  // Device index's part of a per-device sum, on `stream` (device index current).
  void all_reduce_on(size_t index, DeviceMemory buffer, int64_t count, cudaStream_t stream) {
    float* data = reinterpret_cast<float*>(static_cast<char*>(buffer.handle) + buffer.offset);
    const ncclResult_t result = ncclAllReduce(data, data, static_cast<size_t>(count),
                                              ncclFloat32, ncclSum, comms_[index], stream);
    if (result == ncclSuccess) return;
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      abort_locked();
    }
    TRIDENT_CUDA_CHECK(result, devices_[index]->ordinal());
  }
  void check_buffers(const std::vector<DeviceMemory>& buffers) const {
    throw_if_failed();
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices (" + names_ + ")");
  }

  // Called with nccl_mutex_ held.
  void abort_locked() {
    if (aborted_) return;
    watchdog_->forget_communicators();
    abort_communicators(comms_);
    aborted_ = true;
  }
  // The watchdog's way in: not while a host call into NCCL holds the communicators (that call
  // may be the one blocked; the process is then ended without the abort).
  bool try_abort() {
    std::unique_lock<std::mutex> lock(nccl_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    abort_locked();
    return true;
  }

  // The in-place sum of buffers[i] on streams[i]. One thread drives every local device: the
  // calls must form one group, or the first ncclAllReduce would wait for ranks whose call has
  // not been issued yet. A failure leaves the communicators unusable: they are aborted, so
  // that neither a later finalize nor the other ranks wait on them.
  void enqueue(const std::vector<DeviceMemory>& buffers, int64_t count,
               const std::vector<cudaStream_t>& streams) {
    if (count <= 0) return;
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    watchdog_->enter_nccl();
    ncclResult_t result = ncclGroupStart();
    int failed_ordinal = -1;
    for (size_t i = 0; i < devices_.size() && result == ncclSuccess; ++i) {
      float* data = reinterpret_cast<float*>(static_cast<char*>(buffers[i].handle) +
                                             buffers[i].offset);
      result = ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum,
                             comms_[i], streams[i]);
      if (result != ncclSuccess) failed_ordinal = devices_[i]->ordinal();
    }
    // The group's collectives are launched (or fail) here, on all devices at once.
    const ncclResult_t ended = ncclGroupEnd();
    watchdog_->leave_nccl();
    if (result == ncclSuccess && ended != ncclSuccess) {
      result = ended;
      failed_ordinal = devices_.front()->ordinal();
    }
    if (result == ncclSuccess) return;
    abort_locked();
    TRIDENT_CUDA_CHECK(result, failed_ordinal);
  }

  // A high-priority communication stream and two events per device, made on first bucketed use
  // (the plain all_reduce_sum needs none).
  void create_side_streams() {
    if (!side_.empty()) return;
    for (CudaDevice* d : devices_) {
      const int ordinal = d->ordinal();
      d->make_current();
      int lowest = 0, highest = 0;
      TRIDENT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest), ordinal);
      cudaStream_t stream = nullptr;
      TRIDENT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, highest),
                         ordinal);
      side_.push_back(stream);
      cudaEvent_t ready = nullptr, done = nullptr;
      TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), ordinal);
      ready_.push_back(ready);
      TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), ordinal);
      done_.push_back(done);
    }
  }

  std::vector<CudaDevice*> devices_;
  std::vector<ncclComm_t> comms_;
  int ranks_;
  std::string names_;
  double timeout_s_;
  std::mutex nccl_mutex_;  // host calls into NCCL, and the abort
  std::atomic<bool> aborted_{false};  // set under nccl_mutex_; read by any thread
  std::unique_ptr<NcclWatchdog> watchdog_;
  std::vector<cudaStream_t> side_;        // per device: where bucketed sums run
  std::vector<cudaEvent_t> ready_, done_;  // compute -> side, side -> compute
  bool started_ = false;
  std::once_flag side_streams_made_;
  std::vector<char> started_on_device_ = std::vector<char>(devices_.size(), 0);  // per device
};

// Communicators for `cuda` made by `init` (one ncclCommInitAll, or grouped ncclCommInitRank
// calls), bounded by the deadline; on failure the ones created are aborted before the throw.
std::vector<ncclComm_t> init_communicators(const std::vector<CudaDevice*>& cuda,
                                           const std::function<ncclResult_t(ncclComm_t*)>& init,
                                           const std::string& what) {
  std::vector<ncclComm_t> comms(cuda.size(), nullptr);
  ncclResult_t result = ncclSuccess;
  {
    CollectiveDeadline deadline(collective_timeout_seconds(),
                                what + " on " + device_ids(cuda) + " waited for the other ranks "
                                "too long (a rank never joined)");
    result = init(comms.data());
  }
  if (result != ncclSuccess) {
    abort_communicators(comms);
    TRIDENT_CUDA_CHECK(result, cuda.front()->ordinal());
  }
  return comms;
}

std::unique_ptr<Collective> nccl_factory(const std::vector<Device*>& devices) {
  return make_nccl_collective(devices);
}

// One rank per device of this process, ranks first_rank ... of total_ranks, joined through the
// unique id that process 0 creates and broadcast_from_first hands to everyone.
std::unique_ptr<Collective> nccl_process_factory(const std::vector<Device*>& devices,
                                                 const BroadcastFromFirst& broadcast_from_first,
                                                 int first_rank, int total_ranks) {
  ncclUniqueId id;
  std::string bytes;
  if (first_rank == 0) {
    TRIDENT_CUDA_CHECK(ncclGetUniqueId(&id), -1);
    bytes.assign(id.internal, sizeof(id.internal));
  }
  broadcast_from_first(bytes);  // every process, before anything may throw
  if (bytes.size() != sizeof(id.internal))
    throw Error("NCCL unique id of " + std::to_string(bytes.size()) + " bytes, expected " +
                std::to_string(sizeof(id.internal)));
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  std::vector<CudaDevice*> cuda = as_cuda_devices(devices);
  if (cuda.empty()) throw Error("NCCL across processes: a device reporting backend 'cuda' is not "
                                "a CUDA device");
  std::vector<ncclComm_t> comms = init_communicators(
      cuda,
      [&](ncclComm_t* out) {
        // Several devices of one thread: grouped, each call with its device current.
        CurrentDeviceGuard restore;
        ncclResult_t result = ncclGroupStart();
        for (size_t i = 0; i < cuda.size() && result == ncclSuccess; ++i) {
          if (cudaSetDevice(cuda[i]->ordinal()) != cudaSuccess) {
            result = ncclUnhandledCudaError;
            break;
          }
          result = ncclCommInitRank(&out[i], total_ranks, id, first_rank + static_cast<int>(i));
        }
        const ncclResult_t ended = ncclGroupEnd();  // blocks until every rank has joined
        return result != ncclSuccess ? result : ended;
      },
      "ncclCommInitRank");
  return std::make_unique<NcclCollective>(std::move(cuda), std::move(comms), first_rank,
                                          total_ranks);
}

}  // namespace

void register_nccl_collective() {
  register_collective_factory("cuda", &nccl_factory);
  register_process_collective_factory("cuda", &nccl_process_factory);
}

std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices) {
  std::vector<CudaDevice*> cuda = as_cuda_devices(devices);
  if (cuda.empty()) return nullptr;
  std::vector<int> ordinals;
  for (const CudaDevice* d : cuda) ordinals.push_back(d->ordinal());
  std::vector<ncclComm_t> comms = init_communicators(
      cuda,
      [&](ncclComm_t* out) {
        return ncclCommInitAll(out, static_cast<int>(ordinals.size()), ordinals.data());
      },
      "ncclCommInitAll");
  const int ranks = static_cast<int>(ordinals.size());
  return std::make_unique<NcclCollective>(std::move(cuda), std::move(comms), 0, ranks);
}

}  // namespace trident
