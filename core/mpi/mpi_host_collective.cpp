// The cross-process all-reduce for any devices: each process stages its devices' buffers on the
// host and sums them, a non-blocking MPI sum adds the processes' sums (waited for against
// TRIDENT_COLLECTIVE_TIMEOUT_S), and the total goes back to every local device.
#include <algorithm>

#include "trident/core/mpi/mpi_internal.h"

namespace trident::mpi {
namespace {

class MpiHostCollective : public Collective {
 public:
  explicit MpiHostCollective(std::vector<Device*> devices)
      : devices_(std::move(devices)), comm_(world().comm), processes_(world().group.size),
        timeout_s_(collective_timeout_seconds()) {}
  std::string name() const override {
    return "mpi+host (" + std::to_string(processes_) + " processes)";
  }
  void begin_step(int64_t step) override { step_ = step; }
  void abort() override { aborted_ = true; }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    if (aborted_) throw Error("all_reduce_sum after the collective was aborted");
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices");
    const size_t n = static_cast<size_t>(count);
    sum_.resize(n);
    part_.resize(n);
    devices_[0]->copy_to_host(sum_.data(), buffers[0], n * sizeof(float));
    for (size_t d = 1; d < devices_.size(); ++d) {
      devices_[d]->copy_to_host(part_.data(), buffers[d], n * sizeof(float));
      for (size_t k = 0; k < n; ++k) sum_[k] += part_[k];
    }
    // MPI counts are int: large buffers go in chunks, all started before the first wait.
    constexpr size_t kChunk = size_t(1) << 30;
    std::vector<MPI_Request> requests;
    for (size_t begin = 0; begin < n; begin += kChunk) {
      requests.push_back(MPI_REQUEST_NULL);
      const int chunk = static_cast<int>(std::min(kChunk, n - begin));
      TRIDENT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, sum_.data() + begin, chunk, MPI_FLOAT,
                                       MPI_SUM, comm_, &requests.back()));
    }
    const std::string when =
        step_ > 0 ? "of step " + std::to_string(step_) : "before the first step";
    for (MPI_Request& request : requests)
      wait_or_time_out(request, timeout_s_, "in an all-reduce of " + std::to_string(n) + " floats",
                       when);
    for (size_t d = 0; d < devices_.size(); ++d)
      devices_[d]->copy_from_host(buffers[d], sum_.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  MPI_Comm comm_;
  int processes_;
  double timeout_s_;
  int64_t step_ = 0;
  bool aborted_ = false;
  std::vector<float> sum_, part_;
};

}  // namespace

std::unique_ptr<Collective> make_mpi_host_collective(const std::vector<Device*>& devices) {
  return std::make_unique<MpiHostCollective>(devices);
}

}  // namespace trident::mpi
