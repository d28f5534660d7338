// Collectives across the devices that train one model together: the sum of one buffer per device,
// left in every device's buffer. NCCL implements it for CUDA GPUs (backends/cuda), MPI across
// processes (core/mpi), and the host-staged fallback here works for any set of devices.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"

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
