// Device selection: names to devices, with errors that list what exists.
#include "trident/core/registry.h"

#include <algorithm>
#include <sstream>

#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident {

std::vector<int> DiscoveryScope::devices_to_open(const std::string& backend, int count) const {
  std::vector<int> all;
  for (int i = 0; i < count; ++i) all.push_back(i);
  if (!limited) return all;
  auto it = only.find(backend);
  if (it != only.end()) {
    if (std::find(it->second.begin(), it->second.end(), kAll) != it->second.end()) return all;
    std::vector<int> chosen;
    for (int i : all)
      if (std::find(it->second.begin(), it->second.end(), i) != it->second.end())
        chosen.push_back(i);
    return chosen;
  }
  if (listed) return {};
  if (count >= local_size) return {local_rank};
  return all;
}

std::string DiscoveryScope::describe() const {
  if (!limited) return "this process opens every device";
  std::string share;
  for (const auto& [backend, numbers] : only)
    for (int n : numbers)
      share += (share.empty() ? "" : ",") + backend + ":" + (n == kAll ? "all" : std::to_string(n));
  if (!listed)
    share += std::string(share.empty() ? "" : "; ") + "device " + std::to_string(local_rank) +
             " of each backend that has one per process";
  return "this process opens only its share (process " + std::to_string(local_rank) + " of " +
         std::to_string(local_size) + " on this machine: " + share + ")";
}

// DeviceRegistry::global() and limit_global_discovery() are defined by the registry layer
// (backends/register_builtin.cpp), which links the backends: core knows none of them.

void DeviceRegistry::add_backend(std::unique_ptr<Backend> backend) {
  BackendEntry entry;
  entry.name = backend->name();
  // Under a launcher without a device list each process trains on a device of the default
  // backend alone: TRIDENT_BACKEND's, else the first with devices (registration order: CUDA,
  // then OpenCL), so any other backend opens nothing.
  DiscoveryScope scope = scope_;
  if (scope.limited && !scope.listed) {
    bool earlier_found = false;
    for (const auto& b : backends_) earlier_found = earlier_found || !b.devices.empty();
    const auto chosen = env_string("TRIDENT_BACKEND");
    if (chosen ? *chosen != entry.name : earlier_found) {
      scope.listed = true;  // and named in no list: nothing
      scope.only.clear();
    }
  }
  try {
    entry.devices = backend->discover_in_scope(scope, entry.why_none);
  } catch (const UsageError&) {
    throw;  // a wrong TRIDENT_* setting: say which, not "no device available" with it in a list
  } catch (const std::exception& e) {
    entry.devices.clear();
    entry.why_none = e.what();
  }
  if (entry.devices.empty() && entry.why_none.empty()) entry.why_none = "no devices found";
  backends_.push_back(std::move(entry));
}

std::vector<Device*> DeviceRegistry::all_devices() const {
  std::vector<Device*> out;
  for (const auto& b : backends_)
    for (const auto& d : b.devices) out.push_back(d.get());
  return out;
}

const DeviceRegistry::BackendEntry* DeviceRegistry::find_backend(const std::string& name) const {
  for (const auto& b : backends_)
    if (b.name == name) return &b;
  return nullptr;
}

std::string DeviceRegistry::describe() const {
  std::ostringstream out;
  for (const auto& b : backends_) {
    out << b.name << ": " << b.devices.size() << " device" << (b.devices.size() == 1 ? "" : "s");
    if (b.devices.empty()) out << " (" << b.why_none << ")";
    for (const auto& d : b.devices) out << "\n  " << d->info().id() << "  " << d->info().name;
    out << "\n";
  }
  if (scope_.limited) out << "(" << scope_.describe() << ")\n";
  return out.str();
}

Device& DeviceRegistry::backend_default(const BackendEntry& entry) const {
  if (entry.devices.empty())
    throw DeviceNotFound("backend '" + entry.name + "' has no devices (" + entry.why_none +
                         ").\nAvailable:\n" + describe());
  for (const auto& d : entry.devices)
    if (d->info().type == "gpu") return *d;
  return *entry.devices.front();
}

std::string DeviceRegistry::backend_names() const {
  std::string names;
  for (const auto& b : backends_) names += (names.empty() ? "" : ", ") + b.name;
  return names;
}

Device& DeviceRegistry::device(const std::string& spec) const {
  const auto colon = spec.find(':');
  const std::string backend = spec.substr(0, colon);
  const BackendEntry* entry = find_backend(backend);
  if (!entry) {
    throw DeviceNotFound("unknown backend '" + backend + "' in device name '" + spec +
                         "'; compiled-in backends: " + backend_names() + ".\nAvailable:\n" +
                         describe());
  }
  if (colon == std::string::npos) return backend_default(*entry);
  const std::string index_text = spec.substr(colon + 1);
  const bool numeric = !index_text.empty() && index_text.size() <= 6 &&
                       std::all_of(index_text.begin(), index_text.end(), ::isdigit);
  if (numeric)  // the device's own number: in a limited scope, not its position in the list
    for (const auto& d : entry->devices)
      if (d->info().index == std::stoi(index_text)) return *d;
  throw DeviceNotFound("no device '" + spec + "': backend '" + backend + "' has " +
                       std::to_string(entry->devices.size()) + " device(s)" +
                       (entry->devices.empty() ? " (" + entry->why_none + ")" : "") +
                       (scope_.limited ? "; " + scope_.describe() : std::string()) +
                       ".\nAvailable:\n" + describe());
}

std::vector<Device*> DeviceRegistry::device_list(const std::string& list) const {
  std::vector<Device*> out;
  for (const std::string& item : split(list, ',')) {
    if (item.empty())
      throw DeviceNotFound("empty name in device list '" + list + "'.\nAvailable:\n" + describe());
    std::vector<Device*> named;
    const auto colon = item.find(':');
    if (colon != std::string::npos && item.substr(colon + 1) == "all") {
      const BackendEntry* entry = find_backend(item.substr(0, colon));
      if (!entry || entry->devices.empty())
        throw DeviceNotFound("'" + item + "' names no devices.\nAvailable:\n" + describe());
      for (const auto& d : entry->devices) named.push_back(d.get());
    } else {
      named.push_back(&device(item));
    }
    for (Device* d : named) {
      if (std::find(out.begin(), out.end(), d) != out.end())
        throw DeviceNotFound("device " + d->info().id() + " is named twice in '" + list + "'");
      out.push_back(d);
    }
  }
  return out;
}

Device& DeviceRegistry::default_device() const {
  if (auto backend = env_string("TRIDENT_BACKEND")) {
    if (!find_backend(*backend)) {
      throw DeviceNotFound("TRIDENT_BACKEND='" + *backend + "' names no backend; compiled-in " +
                           "backends: " + backend_names() + ".\nAvailable:\n" + describe());
    }
    return backend_default(*find_backend(*backend));
  }
  if (auto* cuda = find_backend("cuda"); cuda && !cuda->devices.empty()) return *cuda->devices[0];
  if (auto* cl = find_backend("opencl"))
    for (const auto& d : cl->devices)
      if (d->info().type == "gpu") return *d;
  if (auto* cpu = find_backend("cpu"); cpu && !cpu->devices.empty()) return *cpu->devices[0];
  throw DeviceNotFound("no device available.\n" + describe());
}

std::vector<Device*> DeviceRegistry::selected_devices() const {
  if (auto list = env_string("TRIDENT_DEVICES")) return device_list(*list);
  return {&default_device()};
}

}  // namespace trident
