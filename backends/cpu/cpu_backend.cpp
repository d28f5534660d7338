// The cpu backend: discovers one CPU device, or TRIDENT_CPU_DEVICES of them sharing the cores.
#include <sched.h>

#include <fstream>
#include <memory>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"

namespace trident {
namespace {

int usable_hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, tbb::this_task_arena::max_concurrency());
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "CPU";
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::vector<std::unique_ptr<Device>> discover(std::string& why_none) override {
    (void)why_none;  // the host CPU is always there
    const CpuSplit split = cpu_device_split();
    const std::string model = cpu_model_name();
    std::vector<std::unique_ptr<Device>> devices;
    for (int i = 0; i < split.devices; ++i)
      devices.push_back(std::make_unique<CpuDevice>(i, split.threads[size_t(i)], model));
    return devices;
  }
};

}  // namespace

CpuSplit cpu_device_split() {
  const bool threads_set = env_string("TRIDENT_NUM_THREADS").has_value();
  const int threads = int(env_int("TRIDENT_NUM_THREADS", usable_hardware_threads(), 1, 4096));
  CpuSplit split;
  split.devices = int(env_int("TRIDENT_CPU_DEVICES", 1, 1, 4096));
  // Every device is a replica holding the whole data set: more devices than threads only
  // multiplies memory (1000 devices on 2 cores took 14.7 GB). Oversubscribing is allowed when
  // asked for explicitly, through TRIDENT_NUM_THREADS.
  if (split.devices > threads)
    throw UsageError("TRIDENT_CPU_DEVICES=" + std::to_string(split.devices) + " asks for more CPU devices than the " +
                     std::to_string(threads) + " threads they share (" +
                     (threads_set ? "TRIDENT_NUM_THREADS" : "the cores this process may use") +
                     "); each device needs a thread of its own. Use at most " + std::to_string(threads) +
                     ", or set TRIDENT_NUM_THREADS to at least " + std::to_string(split.devices) +
                     " to oversubscribe the cores");
  for (int i = 0; i < split.devices; ++i)
    split.threads.push_back(
        std::max(1, threads * (i + 1) / split.devices - threads * i / split.devices));
  return split;
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace trident
