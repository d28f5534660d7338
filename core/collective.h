// Collectives across the devices that train one model together: the sum of one buffer per device,
// left in every device's buffer. NCCL implements it for CUDA GPUs (backends/cuda), MPI across
// processes (core/mpi), and the host-staged fallback here works for any set of devices.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

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

}  // namespace trident
