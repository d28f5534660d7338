// Host-staged all-reduce and the choice of collective for a device set.
#include "trident/core/collective.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <tbb/parallel_for.h>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/thread_annotations.h"

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
    {
      TsanForkJoin edges;
      tbb::parallel_for(size_t(0), devices_.size(), edges.around([&](size_t i) {
        staging_[i].resize(n);
        devices_[i]->copy_to_host(staging_[i].data(), buffers[i], n * sizeof(float));
      }));
    }
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
std::map<std::string, ProcessCollectiveFactory>& process_factories() {
  static std::map<std::string, ProcessCollectiveFactory> table;
  return table;
}
std::mutex factories_mutex;

std::mutex failure_handler_mutex;
CollectiveFailureHandler& failure_handler() {
  static CollectiveFailureHandler handler;
  return handler;
}

}  // namespace

double collective_timeout_seconds() {
  return static_cast<double>(env_int("TRIDENT_COLLECTIVE_TIMEOUT_S", 600, 0, 7 * 24 * 3600));
}

std::string collective_timeout_text(double seconds) {
  return " (TRIDENT_COLLECTIVE_TIMEOUT_S=" + std::to_string(static_cast<long>(seconds)) + ")";
}

void set_collective_failure_handler(CollectiveFailureHandler handler) {
  std::lock_guard<std::mutex> lock(failure_handler_mutex);
  failure_handler() = std::move(handler);
}

void report_collective_failure(const std::string& message) {
  CollectiveFailureHandler handler;
  {
    std::lock_guard<std::mutex> lock(failure_handler_mutex);
    handler = failure_handler();
  }
  if (handler) return handler(message);
  // Called from a watchdog thread while the main thread may be blocked in a device wait that
  // will never return: nothing but ending the process frees the job (mpirun then ends the rest).
  std::fprintf(stderr, "trident: %s\nstopping this process\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

struct CollectiveDeadline::State {
  std::mutex mutex;
  std::condition_variable done;
  bool returned = false;
};

CollectiveDeadline::CollectiveDeadline(double timeout_s, std::string message) {
  if (timeout_s <= 0) return;
  state_ = std::make_shared<State>();
  // Detached, holding the state: a process that is being ended need not join it.
  std::thread([state = state_, timeout_s, message = std::move(message)] {
    std::unique_lock<std::mutex> lock(state->mutex);
    if (state->done.wait_for(lock, std::chrono::duration<double>(timeout_s),
                             [&] { return state->returned; }))
      return;
    lock.unlock();
    report_collective_failure(message + collective_timeout_text(timeout_s));
  }).detach();
}

CollectiveDeadline::~CollectiveDeadline() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->returned = true;
  state_->done.notify_all();
}

std::unique_ptr<Collective> make_host_staged_collective(const std::vector<Device*>& devices) {
  return std::make_unique<HostStaged>(devices);
}

void register_collective_factory(const std::string& backend, CollectiveFactory factory) {
  std::lock_guard<std::mutex> lock(factories_mutex);
  factories()[backend] = factory;
}

void register_process_collective_factory(const std::string& backend,
                                         ProcessCollectiveFactory factory) {
  std::lock_guard<std::mutex> lock(factories_mutex);
  process_factories()[backend] = factory;
}

ProcessCollectiveFactory find_process_collective_factory(const std::string& backend) {
  std::lock_guard<std::mutex> lock(factories_mutex);
  auto it = process_factories().find(backend);
  return it == process_factories().end() ? nullptr : it->second;
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

std::unique_ptr<Collective> make_process_collective(
    const std::vector<Device*>& devices, const ProcessChannel& channel,
    bool use_backend_collective,
    const std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)>& fallback) {
  if (devices.empty()) throw Error("make_process_collective: no devices");
  const std::string backend = devices[0]->info().backend;
  bool same_backend = true;
  for (Device* d : devices) same_backend = same_backend && d->info().backend == backend;
  const ProcessCollectiveFactory factory =
      same_backend ? find_process_collective_factory(backend) : nullptr;
  // FNV-1a of the backend's name, 62 bits so that its negation cannot overflow; -1: mixed.
  int64_t backend_id = -1;
  if (same_backend) {
    uint64_t hash = 14695981039346656037ull;
    for (unsigned char c : backend) hash = (hash ^ c) * 1099511628211ull;
    backend_id = static_cast<int64_t>(hash >> 2);
  }
  const int64_t local = static_cast<int64_t>(devices.size());
  const int64_t wanted = use_backend_collective && factory ? 1 : 0;
  // One exchange: minima of the values and of their negations (the maxima).
  const std::vector<int64_t> least =
      channel.min_over_processes({local, -local, wanted, backend_id, -backend_id});
  if (least.size() != 5) throw Error("make_process_collective: the channel's minimum lost values");
  if (least[0] != -least[1])
    throw UsageError("every process of the job must train on the same number of devices; "
                     "they have between " + std::to_string(least[0]) + " and " +
                     std::to_string(-least[1]) + " (this one: " + std::to_string(local) + ")");
  if (least[2] == 1 && least[3] == -least[4] && backend_id >= 0) {
    const int first_rank = channel.rank * static_cast<int>(local);
    if (auto own = factory(devices, channel.broadcast_from_first, first_rank,
                           channel.size * static_cast<int>(local)))
      return own;
    throw Error("the " + backend + " backend's multi-process collective declined this "
                "process's devices");
  }
  return fallback(devices);
}

}  // namespace trident
