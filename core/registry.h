// DeviceRegistry: the backends compiled in, the devices each one found at run time, and the
// selection rules (TRIDENT_BACKEND, TRIDENT_DEVICES) that turn names into devices.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"

namespace trident {

// Which devices discovery opens (creates a context, library handles and memory on). Under a
// launcher each process opens only its own GPUs: with 8 processes on 8 GPUs, 8 CUDA contexts
// instead of 64, and none on a GPU another process holds in exclusive mode. Backends whose
// devices cost nothing to open (the CPU) open all of them regardless. Device numbers stay those
// of the whole machine: the one GPU process 1 opens is still cuda:1.
struct DiscoveryScope {
  static constexpr int kAll = -1;
  bool limited = false;  // false: every device (a single process)
  // limited: per backend named, the device numbers this process may open (kAll: all of them).
  std::map<std::string, std::vector<int>> only;
  // limited, with a device list: a backend `only` does not name opens nothing. Without a list
  // (false), such a backend opens device local_rank when it has at least local_size devices
  // (one per process), else all (one GPU per process made visible by CUDA_VISIBLE_DEVICES, or
  // one device that the processes share).
  bool listed = false;
  int local_rank = 0, local_size = 1;

  // The numbers, in increasing order, of the devices of `backend` to open among its `count`.
  std::vector<int> devices_to_open(const std::string& backend, int count) const;
  // "this process opens only its share (process 1 of 2 on this machine: cuda:1)", for messages.
  std::string describe() const;
};

// One compiled-in backend. Registered explicitly (static initializers vanish from static archives).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda", "opencl"
  // The devices present now. None is not an error: set why_none ("no NVIDIA driver found") and
  // return nothing; never abort the program because a driver is missing.
  virtual std::vector<std::unique_ptr<Device>> discover(std::string& why_none) = 0;
  // The same, opening only the devices `scope` allows (scope.devices_to_open); each keeps its
  // machine-wide number in DeviceInfo::index. The default opens all: right for cheap devices.
  virtual std::vector<std::unique_ptr<Device>> discover_in_scope(const DiscoveryScope& scope,
                                                                 std::string& why_none) {
    (void)scope;
    return discover(why_none);
  }
};

class DeviceRegistry {
 public:
  struct BackendEntry {
    std::string name;
    std::string why_none;  // set when devices is empty
    std::vector<std::unique_ptr<Device>> devices;
  };

  // The process-wide registry with every compiled-in backend registered and discovered. It lives
  // until the process ends or release_global() (never destroyed by static destruction, so no
  // driver is torn down at an unknown point of it).
  // Defined by the registry layer (backends/register_builtin.cpp, target trident_backends).
  static DeviceRegistry& global();
  // Destroys the global registry's devices now (their memory, queues and contexts), where a
  // program is done with them: before it exits, so that leak checkers (compute-sanitizer
  // --leak-check full) see every allocation returned. Nothing may use a device or tensor of it
  // afterwards, and global() then throws. Does nothing when global() was never called.
  static void release_global() noexcept;
  // Limits what global() will open (under a launcher: this process's devices only). Must come
  // before global() is first called; returns false, changing nothing, when it is too late.
  static bool limit_global_discovery(const DiscoveryScope& scope);

  explicit DeviceRegistry(DiscoveryScope scope = {}) : scope_(std::move(scope)) {}
  // Registers a backend and runs its discovery now (within the registry's scope); a discovery
  // that throws is recorded as why_none.
  void add_backend(std::unique_ptr<Backend> backend);
  const DiscoveryScope& scope() const { return scope_; }

  const std::vector<BackendEntry>& backends() const { return backends_; }
  std::vector<Device*> all_devices() const;

  // "cuda:1", "opencl:0", "cpu" (= the backend's default device); the number is DeviceInfo::index.
  // Unknown: DeviceNotFound listing all (and, in a limited scope, saying what this process opens).
  Device& device(const std::string& spec) const;
  // A comma-separated list ("cuda:0,cuda:1", "cuda:all", "cpu:0,opencl:0"); duplicates and
  // unknown names are errors that list what exists.
  std::vector<Device*> device_list(const std::string& list) const;
  // TRIDENT_BACKEND's default device, else the best present: a CUDA GPU, an OpenCL GPU, the CPU.
  // A backend's default device is its first GPU, else its first device.
  Device& default_device() const;
  // TRIDENT_DEVICES if set, else {default_device()}.
  std::vector<Device*> selected_devices() const;
  // Every backend with its devices, or the reason it has none (for messages and `trident devices`).
  std::string describe() const;

 private:
  const BackendEntry* find_backend(const std::string& name) const;
  std::string backend_names() const;  // "cpu, cuda, opencl": the compiled-in backends
  Device& backend_default(const BackendEntry& entry) const;
  DiscoveryScope scope_;
  std::vector<BackendEntry> backends_;
};

// Registers every backend this build was compiled with (backends/register_builtin.cpp, the
// registry layer above the backends).
void register_builtin_backends(DeviceRegistry& registry);

}  // namespace trident
