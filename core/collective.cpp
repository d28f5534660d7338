// Host-staged all-reduce and the choice of collective for a device set.
#include "trident/core/collective.h"

#include <map>
#include <mutex>

#include <tbb/parallel_for.h>

#include "trident/core/error.h"

namespace trident {
namespace {

class SingleDevice : public Collective {
 public:
  std::string name() const override { return "none"; }
  void all_reduce_sum(const std::vector<DeviceMemory>&, int64_t) override {}
  bool capturable() const override { return true; }
};

class HostStaged : public Collective {
 public:
  explicit HostStaged(std::vector<Device*> devices) : devices_(std::move(devices)) {}
  std::string name() const override { return "host"; }
  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices");
    const size_t n = static_cast<size_t>(count);
    staging_.resize(devices_.size());
    // Each device's copy waits for its own queue; run them side by side.
    tbb::parallel_for(size_t(0), devices_.size(), [&](size_t i) {
      staging_[i].resize(n);
      devices_[i]->copy_to_host(staging_[i].data(), buffers[i], n * sizeof(float));
    });
    std::vector<float>& sum = staging_[0];
    for (size_t d = 1; d < devices_.size(); ++d)
      for (size_t k = 0; k < n; ++k) sum[k] += staging_[d][k];
    for (size_t i = 0; i < devices_.size(); ++i)
      devices_[i]->copy_from_host(buffers[i], sum.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  std::vector<std::vector<float>> staging_;
};

std::map<std::string, CollectiveFactory>& factories() {
  static std::map<std::string, CollectiveFactory> table;
  return table;
}
std::mutex factories_mutex;

}  // namespace

std::unique_ptr<Collective> make_host_staged_collective(const std::vector<Device*>& devices) {
  return std::make_unique<HostStaged>(devices);
}

void register_collective_factory(const std::string& backend, CollectiveFactory factory) {
  std::lock_guard<std::mutex> lock(factories_mutex);
  factories()[backend] = factory;
}

std::unique_ptr<Collective> make_collective(const std::vector<Device*>& devices) {
  if (devices.empty()) throw Error("make_collective: no devices");
  if (devices.size() == 1) return std::make_unique<SingleDevice>();
  const std::string backend = devices[0]->info().backend;
  bool same_backend = true;
  for (Device* d : devices) same_backend = same_backend && d->info().backend == backend;
  if (same_backend) {
    std::lock_guard<std::mutex> lock(factories_mutex);
    auto it = factories().find(backend);
    if (it != factories().end())
      if (auto collective = it->second(devices)) return collective;
  }
  return make_host_staged_collective(devices);
}

}  // namespace trident
