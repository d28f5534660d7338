// The NCCL all-reduce for CUDA devices: one communicator per device, the sum queued in place on
// each device's own stream, so it orders after backward and before the update with no host wait.
#include "trident/backends/cuda/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/backends/cuda/cuda_device.h"
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

class NcclCollective : public Collective {
 public:
  // comms[i] belongs to devices[i]; `ranks` is the communicators' size (all processes).
  NcclCollective(std::vector<CudaDevice*> devices, std::vector<ncclComm_t> comms, int ranks)
      : devices_(std::move(devices)), comms_(std::move(comms)), ranks_(ranks),
        names_(device_ids(devices_)) {}

  ~NcclCollective() override {
    // Finalizing waits until every rank's queued work is done, so one thread must finalize all
    // its communicators in one group (one after another would wait on the next forever); then
    // each is freed locally. A destructor cannot throw: failures are reported.
    auto report = [&](const char* call, ncclResult_t result) {
      if (result != ncclSuccess)
        log_warning(std::string(call) + " failed on " + names_ + ": " +
                    ncclGetErrorString(result));
    };
    report("ncclGroupStart", ncclGroupStart());
    for (ncclComm_t comm : comms_) report("ncclCommFinalize", ncclCommFinalize(comm));
    report("ncclGroupEnd", ncclGroupEnd());
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

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    check_buffers(buffers);
    std::vector<cudaStream_t> compute;
    for (CudaDevice* d : devices_) compute.push_back(d->stream());
    enqueue(buffers, count, compute);
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
    create_side_streams();
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
  }

 private:
  void check_buffers(const std::vector<DeviceMemory>& buffers) const {
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices (" + names_ + ")");
  }

  // The in-place sum of buffers[i] on streams[i]. One thread drives every local device: the
  // calls must form one group, or the first ncclAllReduce would wait for ranks whose call has
  // not been issued yet.
  void enqueue(const std::vector<DeviceMemory>& buffers, int64_t count,
               const std::vector<cudaStream_t>& streams) {
    if (count <= 0) return;
    TRIDENT_CUDA_CHECK(ncclGroupStart(), -1);
    for (size_t i = 0; i < devices_.size(); ++i) {
      float* data = reinterpret_cast<float*>(static_cast<char*>(buffers[i].handle) +
                                             buffers[i].offset);
      const ncclResult_t queued = ncclAllReduce(data, data, static_cast<size_t>(count),
                                                ncclFloat32, ncclSum, comms_[i], streams[i]);
      if (queued != ncclSuccess) {
        ncclGroupEnd();  // close the group before reporting; its own result adds nothing
        TRIDENT_CUDA_CHECK(queued, devices_[i]->ordinal());
      }
    }
    // The group's collectives are launched (or fail) here, on all devices at once.
    TRIDENT_CUDA_CHECK(ncclGroupEnd(), devices_.front()->ordinal());
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
  std::vector<cudaStream_t> side_;        // per device: where bucketed sums run
  std::vector<cudaEvent_t> ready_, done_;  // compute -> side, side -> compute
  bool started_ = false;
};

std::unique_ptr<Collective> nccl_factory(const std::vector<Device*>& devices) {
  return make_nccl_collective(devices);
}

}  // namespace

void register_nccl_collective() { register_collective_factory("cuda", &nccl_factory); }

std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices) {
  std::vector<CudaDevice*> cuda = as_cuda_devices(devices);
  if (cuda.empty()) return nullptr;
  std::vector<int> ordinals;
  for (const CudaDevice* d : cuda) ordinals.push_back(d->ordinal());
  std::vector<ncclComm_t> comms(cuda.size(), nullptr);
  TRIDENT_CUDA_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()),
                     ordinals.front());
  return std::make_unique<NcclCollective>(std::move(cuda), std::move(comms),
                                          static_cast<int>(ordinals.size()));
}

std::string nccl_unique_id() {
  ncclUniqueId id;
  TRIDENT_CUDA_CHECK(ncclGetUniqueId(&id), -1);
  return std::string(id.internal, sizeof(id.internal));
}

std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices,
                                                 const std::string& unique_id, int first_rank,
                                                 int total_ranks) {
  std::vector<CudaDevice*> cuda = as_cuda_devices(devices);
  if (cuda.empty()) return nullptr;
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal))
    throw Error("NCCL unique id of " + std::to_string(unique_id.size()) + " bytes, expected " +
                std::to_string(sizeof(id.internal)));
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  std::vector<ncclComm_t> comms(cuda.size(), nullptr);
  {
    CurrentDeviceGuard restore;
    TRIDENT_CUDA_CHECK(ncclGroupStart(), -1);
    for (size_t i = 0; i < cuda.size(); ++i) {
      const cudaError_t selected = cudaSetDevice(cuda[i]->ordinal());
      const ncclResult_t joined =
          selected == cudaSuccess ? ncclCommInitRank(&comms[i], total_ranks, id,
                                                     first_rank + static_cast<int>(i))
                                  : ncclSuccess;
      if (selected != cudaSuccess || joined != ncclSuccess) {
        ncclGroupEnd();  // close the group before reporting
        TRIDENT_CUDA_CHECK(selected, cuda[i]->ordinal());
        TRIDENT_CUDA_CHECK(joined, cuda[i]->ordinal());
      }
    }
    // Blocks until every rank of every process has joined.
    TRIDENT_CUDA_CHECK(ncclGroupEnd(), cuda.front()->ordinal());
  }
  return std::make_unique<NcclCollective>(std::move(cuda), std::move(comms), total_ranks);
}

}  // namespace trident
