// The registry layer: the one place that lists the compiled-in backends (explicit registration:
// static initializers would be dropped from a static archive), and the process-wide registry
// built from them. A new backend adds one line here. It sits above the backends' layers and
// below models (CMakeLists.txt), so core never refers to a backend.
#include "trident/core/registry.h"

#include "trident/core/error.h"

#include <memory>
#include <mutex>

namespace trident {

std::unique_ptr<Backend> make_cpu_backend();
#ifdef TRIDENT_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();
#endif
#ifdef TRIDENT_HAVE_NCCL
void register_nccl_collective();  // backends/cuda/nccl_collective.h: NCCL for CUDA device sets
#endif
#ifdef TRIDENT_HAVE_OPENCL
std::unique_ptr<Backend> make_opencl_backend();
#endif

void register_builtin_backends(DeviceRegistry& registry) {
#ifdef TRIDENT_HAVE_NCCL
  register_nccl_collective();
#endif
#ifdef TRIDENT_HAVE_CUDA
  registry.add_backend(make_cuda_backend());
#endif
#ifdef TRIDENT_HAVE_OPENCL
  registry.add_backend(make_opencl_backend());
#endif
  registry.add_backend(make_cpu_backend());
}

namespace {
std::mutex global_scope_mutex;
DiscoveryScope global_scope;
bool global_built = false;
DeviceRegistry* global_registry = nullptr;  // set once built; null again after release_global()
bool global_released = false;
}  // namespace

bool DeviceRegistry::limit_global_discovery(const DiscoveryScope& scope) {
  std::lock_guard<std::mutex> lock(global_scope_mutex);
  if (global_built) return false;
  global_scope = scope;
  return true;
}

DeviceRegistry& DeviceRegistry::global() {
  static DeviceRegistry* registry = [] {
    DiscoveryScope scope;
    {
      std::lock_guard<std::mutex> lock(global_scope_mutex);
      global_built = true;
      scope = global_scope;
    }
    // Released below and never deleted: see core/registry.h.
    auto r = std::make_unique<DeviceRegistry>(scope);
    register_builtin_backends(*r);  // may throw a UsageError (a bad TRIDENT_* variable)
    std::lock_guard<std::mutex> lock(global_scope_mutex);
    global_registry = r.get();
    return r.release();
  }();
  {
    std::lock_guard<std::mutex> lock(global_scope_mutex);
    if (global_released)
      throw Error("the global device registry was released (DeviceRegistry::release_global)");
  }
  return *registry;
}

void DeviceRegistry::release_global() noexcept {
  DeviceRegistry* registry = nullptr;
  {
    std::lock_guard<std::mutex> lock(global_scope_mutex);
    registry = global_registry;
    global_registry = nullptr;
    global_released = global_released || registry;
  }
  delete registry;
}

}  // namespace trident
