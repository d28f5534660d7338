// KernelProfile: where an OpenCL step's time goes, from the queue's event timestamps.
// TRIDENT_OPENCL_PROFILE=1 turns it on (the queue is then created with profiling enabled, every
// kernel, fill and copy keeps an event); the table goes to the log (core/log.h) when the device is destroyed
// or, for devices that live until the process ends (the registry's), at exit:
// per kernel name the launches and GPU time, and how much of the time between the first start
// and the last end of each synchronized window the GPU spent idle between commands (launch gaps).
#pragma once
#include <CL/cl.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trident::opencl {

bool opencl_profiling_requested();  // TRIDENT_OPENCL_PROFILE=1 (any form env_flag accepts)

class KernelProfile {
 public:
  explicit KernelProfile(std::string label);  // label: the device, for the table's title
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;
  ~KernelProfile();  // prints the table (of what collect() has read)

  // Keeps `event` (of a command named `name`) until collect(); a null event is ignored.
  void add(const char* name, cl_event event);
  // Reads and releases every kept event; call after the queue has finished them.
  void collect();
  // The table described above ("" when nothing was profiled).
  std::string report() const;

 private:
  struct Totals {
    uint64_t launches = 0;
    double ns = 0;
  };
  std::string label_;
  std::vector<std::pair<const char*, cl_event>> pending_;
  std::map<std::string, Totals> totals_;
  double busy_ns_ = 0, span_ns_ = 0;
  uint64_t commands_ = 0;
};

}  // namespace trident::opencl
