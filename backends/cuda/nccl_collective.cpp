// The NCCL all-reduce for CUDA devices: one communicator per device, the sum queued in place on
// each device's own stream, so it orders after backward and before the update with no host wait.
#include "backends/cuda/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_device.h"
#include "core/error.h"

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
      std::fprintf(stderr, "trident: warning: could not restore CUDA device %d after NCCL init\n",
                   saved_);
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
        std::fprintf(stderr, "trident: warning: %s failed on %s: %s\n", call, names_.c_str(),
                     ncclGetErrorString(result));
    };
    report("ncclGroupStart", ncclGroupStart());
    for (ncclComm_t comm : comms_) report("ncclCommFinalize", ncclCommFinalize(comm));
    report("ncclGroupEnd", ncclGroupEnd());
    for (ncclComm_t comm : comms_) report("ncclCommDestroy", ncclCommDestroy(comm));
  }

  std::string name() const override {
    return ranks_ == static_cast<int>(devices_.size()) ? "nccl"
                                                        : "nccl (" + std::to_string(ranks_) + " ranks)";
  }
  bool capturable() const override { return true; }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices (" + names_ + ")");
    if (count <= 0) return;
    // One thread drives every local device: the calls must form one group, or the first
    // ncclAllReduce would wait for ranks whose call has not been issued yet.
    TRIDENT_CUDA_CHECK(ncclGroupStart(), -1);
    for (size_t i = 0; i < devices_.size(); ++i) {
      float* data = reinterpret_cast<float*>(static_cast<char*>(buffers[i].handle) +
                                             buffers[i].offset);
      const ncclResult_t queued =
          ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comms_[i],
                        devices_[i]->stream());
      if (queued != ncclSuccess) {
        ncclGroupEnd();  // close the group before reporting; its own result adds nothing
        TRIDENT_CUDA_CHECK(queued, devices_[i]->ordinal());
      }
    }
    // The group's collectives are launched (or fail) here, on all devices at once.
    TRIDENT_CUDA_CHECK(ncclGroupEnd(), devices_.front()->ordinal());
  }

 private:
  std::vector<CudaDevice*> devices_;
  std::vector<ncclComm_t> comms_;
  int ranks_;
  std::string names_;
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
