// The NCCL watchdog's thread: every 100 ms, the communicators' asynchronous errors, the oldest
// marker's events, and the time spent in a host call into NCCL, against the timeout.
#include "trident/backends/cuda/nccl_watchdog.h"

#include <cstdio>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/core/collective.h"

namespace trident {

using clock_type = std::chrono::steady_clock;

namespace {
// A host far ahead of its GPUs: past this many unfinished markers, the newest is moved forward
// (recorded again) instead of a new one being added.
constexpr size_t kMostPendingMarkers = 64;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             clock_type::now().time_since_epoch()).count();
}
}  // namespace

NcclWatchdog::NcclWatchdog(std::vector<cuda::CudaDevice*> devices, std::vector<ncclComm_t> comms,
                           std::string who, double timeout_s, std::function<bool()> try_abort)
    : devices_(std::move(devices)), comms_(std::move(comms)), who_(std::move(who)),
      timeout_s_(timeout_s), try_abort_(std::move(try_abort)),
      last_progress_(clock_type::now()) {
  thread_ = std::thread([this] { watch(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  auto destroy = [&](const std::vector<cudaEvent_t>& events) {
    for (size_t i = 0; i < events.size(); ++i)
      if (cudaSetDevice(devices_[i]->ordinal()) == cudaSuccess) (void)cudaEventDestroy(events[i]);
  };
  for (const Marker& m : markers_) destroy(m.events);
  for (const auto& events : spare_events_) destroy(events);
}

void NcclWatchdog::mark() {
  for (cuda::CudaDevice* d : devices_) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(d->stream(), &status) != cudaSuccess ||
        status != cudaStreamCaptureStatusNone)
      return;
  }
  std::vector<cudaEvent_t> events;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Steps faster than the watchdog's 100 ms poll fill the queue with finished markers: a full
    // queue is reaped here. Skipping the new marker instead left the work queued after a full
    // queue unwatched: with a rank stopped, the finished markers were reaped, none was pending,
    // and the stall was never reported (2 H200s, mpirun -np 2, steps of 80 us).
    if (markers_.size() >= kMostPendingMarkers) (void)reap_finished(clock_type::now());
    if (markers_.size() >= kMostPendingMarkers) {
      // Still full of unfinished ones: the newest follows the work queued since.
      Marker& newest = markers_.back();
      for (size_t i = 0; i < devices_.size(); ++i) {
        devices_[i]->make_current();
        TRIDENT_CUDA_CHECK(cudaEventRecord(newest.events[i], devices_[i]->stream()),
                           devices_[i]->ordinal());
      }
      return;
    }
    if (!spare_events_.empty()) {
      events = std::move(spare_events_.back());
      spare_events_.pop_back();
    }
  }
  for (size_t i = events.size(); i < devices_.size(); ++i) {
    devices_[i]->make_current();
    cudaEvent_t event = nullptr;
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                       devices_[i]->ordinal());
    events.push_back(event);
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    devices_[i]->make_current();
    TRIDENT_CUDA_CHECK(cudaEventRecord(events[i], devices_[i]->stream()), devices_[i]->ordinal());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (markers_.empty()) last_progress_ = clock_type::now();  // the clock starts with this one
  markers_.push_back({std::move(events), clock_type::now()});
}

void NcclWatchdog::enter_nccl() { in_nccl_since_ns_ = now_ns(); }
void NcclWatchdog::leave_nccl() { in_nccl_since_ns_ = 0; }

void NcclWatchdog::forget_communicators() {
  std::lock_guard<std::mutex> lock(mutex_);
  watch_comms_ = false;
}

std::string NcclWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

std::string NcclWatchdog::describe(const std::string& problem) const {
  const int64_t step = step_;
  return "NCCL watchdog, " + who_ + (step > 0 ? ", step " + std::to_string(step) : "") + ": " +
         problem;
}

// Called with mutex_ held: finished markers, oldest first, go back to the spares; a failed one
// is reported.
std::string NcclWatchdog::reap_finished(clock_type::time_point now) {
  while (!markers_.empty()) {
    Marker& oldest = markers_.front();
    bool finished = true;
    for (size_t i = 0; i < devices_.size() && finished; ++i) {
      const cudaError_t state = cudaSetDevice(devices_[i]->ordinal()) == cudaSuccess
                                    ? cudaEventQuery(oldest.events[i])
                                    : cudaErrorNotReady;
      if (state == cudaErrorNotReady) finished = false;
      else if (state != cudaSuccess)
        return describe("the work queued on " + devices_[i]->info().id() + " failed: " +
                        cuda::describe_status(state));
    }
    if (!finished) break;
    spare_events_.push_back(std::move(oldest.events));
    markers_.pop_front();
    last_progress_ = now;
  }
  return "";
}

// Called with mutex_ held.
std::string NcclWatchdog::check(clock_type::time_point now) {
  if (watch_comms_)
    for (size_t i = 0; i < comms_.size(); ++i) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comms_[i], &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress)
        return describe("the communicator on " + devices_[i]->info().id() + " failed: " +
                        cuda::describe_status(state));
    }
  const std::string failed = reap_finished(now);
  if (!failed.empty()) return failed;
  if (timeout_s_ <= 0) return "";
  const auto seconds = [&](clock_type::time_point since) {
    return std::chrono::duration<double>(now - since).count();
  };
  if (!markers_.empty()) {
    const auto since = std::max(last_progress_, markers_.front().queued);
    if (seconds(since) > timeout_s_)
      return describe("the queued work (its all-reduce included) has not finished for " +
                      std::to_string(static_cast<long>(seconds(since))) + " s" +
                      collective_timeout_text(timeout_s_) +
                      ": another rank has stopped, died or fallen far behind");
  }
  const int64_t entered = in_nccl_since_ns_;
  if (entered != 0 && (now_ns() - entered) * 1e-9 > timeout_s_)
    return describe("a call into NCCL has been blocked for more than " +
                    std::to_string(static_cast<long>(timeout_s_)) + " s" +
                    collective_timeout_text(timeout_s_) + ": another rank is not taking part");
  return "";
}

void NcclWatchdog::watch() {
  std::string found;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_ && found.empty()) {
      wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
      if (!stop_) found = check(clock_type::now());
    }
    if (found.empty()) return;
    failure_ = found;
    watch_comms_ = false;
  }
  // Outside the lock: aborting ends the kernels that wait for the missing rank, so that a host
  // wait on this process returns; the report then ends the process (by default).
  const bool aborted = try_abort_ && try_abort_();
  report_collective_failure(found + (aborted ? "; communicators aborted" : ""));
}

}  // namespace trident
