// DeviceRegistry: the backends compiled in, the devices each one found at run time, and the
// selection rules (TRIDENT_BACKEND, TRIDENT_DEVICES) that turn names into devices.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"

namespace trident {

// One compiled-in backend. Registered explicitly (static initializers vanish from static archives).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda", "opencl"
  // The devices present now. None is not an error: set why_none ("no NVIDIA driver found") and
  // return nothing; never abort the program because a driver is missing.
  virtual std::vector<std::unique_ptr<Device>> discover(std::string& why_none) = 0;
};

class DeviceRegistry {
 public:
  struct BackendEntry {
    std::string name;
    std::string why_none;  // set when devices is empty
    std::vector<std::unique_ptr<Device>> devices;
  };

  // The process-wide registry with every compiled-in backend registered and discovered. It lives
  // until the process ends (never destroyed, so no driver is torn down during static destruction).
  // Defined by the registry layer (backends/register_builtin.cpp, target trident_backends).
  static DeviceRegistry& global();

  DeviceRegistry() = default;
  // Registers a backend and runs its discovery now; a discovery that throws is recorded as why_none.
  void add_backend(std::unique_ptr<Backend> backend);

  const std::vector<BackendEntry>& backends() const { return backends_; }
  std::vector<Device*> all_devices() const;

  // "cuda:1", "opencl:0", "cpu" (= the backend's default device). Unknown: DeviceNotFound listing all.
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
  Device& backend_default(const BackendEntry& entry) const;
  std::vector<BackendEntry> backends_;
};

// Registers every backend this build was compiled with (backends/register_builtin.cpp, the
// registry layer above the backends).
void register_builtin_backends(DeviceRegistry& registry);

}  // namespace trident
