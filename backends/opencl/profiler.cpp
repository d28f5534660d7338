// KernelProfile (see profiler.h).
#include "trident/backends/opencl/profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>

#include "trident/core/env.h"
#include "trident/core/log.h"

namespace trident::opencl {

namespace {
// Events kept before the oldest are waited for and read (a long unsynchronized run stays bounded).
constexpr size_t kMaxPendingEvents = size_t(1) << 16;

// Profiles alive now, printed at exit: registry devices are never destroyed. The printing reads
// only totals already collected (no OpenCL call runs after the driver may be gone).
std::mutex live_mutex;
std::set<KernelProfile*>& live_profiles() {
  static auto* live = new std::set<KernelProfile*>();
  return *live;
}
void print_report(const std::string& report) {
  if (!report.empty()) log_info(report.substr(0, report.size() - 1));  // without its last '\n'
}
void print_live_profiles() {
  std::lock_guard<std::mutex> lock(live_mutex);
  for (KernelProfile* profile : live_profiles()) print_report(profile->report());
  live_profiles().clear();
}
}  // namespace

KernelProfile::KernelProfile(std::string label) : label_(std::move(label)) {
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(print_live_profiles); });
  std::lock_guard<std::mutex> lock(live_mutex);
  live_profiles().insert(this);
}

bool opencl_profiling_requested() { return env_flag("TRIDENT_OPENCL_PROFILE", false); }

KernelProfile::~KernelProfile() {
  for (auto& entry : pending_) clReleaseEvent(entry.second);
  std::lock_guard<std::mutex> lock(live_mutex);
  if (live_profiles().erase(this)) print_report(report());
}

void KernelProfile::add(const char* name, cl_event event) {
  if (!event) return;
  if (pending_.size() >= kMaxPendingEvents) {
    clWaitForEvents(1, &pending_.back().second);
    collect();
  }
  pending_.emplace_back(name, event);
}

void KernelProfile::collect() {
  double first_start = std::numeric_limits<double>::max(), last_end = 0;
  for (auto& [name, event] : pending_) {
    cl_ulong start = 0, end = 0;
    if (clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                nullptr) == CL_SUCCESS &&
        clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) ==
            CL_SUCCESS &&
        end >= start) {
      Totals& t = totals_[name];
      t.launches += 1;
      t.ns += static_cast<double>(end - start);
      busy_ns_ += static_cast<double>(end - start);
      first_start = std::min(first_start, static_cast<double>(start));
      last_end = std::max(last_end, static_cast<double>(end));
      ++commands_;
    }
    clReleaseEvent(event);
  }
  if (last_end > first_start) span_ns_ += last_end - first_start;
  pending_.clear();
}

std::string KernelProfile::report() const {
  if (commands_ == 0) return "";
  std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::string out = "OpenCL profile of " + label_ + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %10s %12s %10s %6s\n", "command", "launches",
                "total ms", "mean us", "share");
  out += line;
  for (const auto& [name, t] : rows) {
    std::snprintf(line, sizeof line, "  %-28s %10llu %12.3f %10.2f %5.1f%%\n", name.c_str(),
                  static_cast<unsigned long long>(t.launches), t.ns * 1e-6,
                  t.ns * 1e-3 / static_cast<double>(t.launches), 100.0 * t.ns / busy_ns_);
    out += line;
  }
  const double idle = std::max(0.0, span_ns_ - busy_ns_);
  std::snprintf(line, sizeof line,
                "  busy %.3f ms of %.3f ms between first start and last end per synchronized "
                "window (idle %.1f%%, %.2f us per command over %llu commands)\n",
                busy_ns_ * 1e-6, span_ns_ * 1e-6, span_ns_ > 0 ? 100.0 * idle / span_ns_ : 0.0,
                idle * 1e-3 / static_cast<double>(commands_),
                static_cast<unsigned long long>(commands_));
  out += line;
  return out;
}

}  // namespace trident::opencl
