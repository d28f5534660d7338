// Capture for OpenCL: a step recorded once as kernel objects with their arguments already set
// (one object per launch, so later launches do not disturb them) plus re-run host-side work
// (CLBlast calls, fills, copies); replay() enqueues them in order with no argument setting and
// no Trident logic.
//
// A step that transfers to or from the host, synchronizes, allocates or frees cannot be
// recorded: capture() then returns nullptr (nothing of the step ran) and callers run it directly.
#include "trident/backends/opencl/cl_queue.h"
#include "trident/core/error.h"
#include "trident/core/log.h"

namespace trident::opencl {

namespace {

class OpenClCapturedWork final : public CapturedWork {
 public:
  OpenClCapturedWork(ClQueue& queue, std::unique_ptr<CaptureRecording> recording)
      : queue_(queue), recording_(std::move(recording)) {}

  void replay() override {
    for (const CaptureRecording::Step& s : recording_->steps) {
      if (!s.kernel) {
        s.op();
        continue;
      }
      cl_event event = nullptr;
      TRIDENT_CL_CHECK(clEnqueueNDRangeKernel(*queue_.queue(), s.kernel, s.range.dims, nullptr,
                                              s.range.global, s.range.local, 0, nullptr,
                                              queue_.profile_slot(event)),
                       queue_.label() + ", kernel " + s.name + " (replay)");
      queue_.profiled(s.name, event);
    }
  }

 private:
  ClQueue& queue_;  // the device's: outlives every capture made on it
  std::unique_ptr<CaptureRecording> recording_;
};

}  // namespace

cl_kernel ClQueue::kernel_for_launch(cl_program program, cl_kernel shared, const char* name) {
  if (!recording_) return shared;
  cl_int status = CL_SUCCESS;
  cl_kernel fresh = clCreateKernel(program, name, &status);
  TRIDENT_CL_CHECK(status, label_ + ", kernel " + name + " (for a capture)");
  recording_->kernels.push_back(fresh);
  return fresh;
}

void ClQueue::submit(cl_kernel kernel, const LaunchRange& range, const char* name) {
  if (recording_) {
    CaptureRecording::Step step;
    step.kernel = kernel;
    step.range = range;
    step.name = name;
    recording_->steps.push_back(std::move(step));
    return;
  }
  cl_event event = nullptr;
  TRIDENT_CL_CHECK(clEnqueueNDRangeKernel(active_, kernel, range.dims, nullptr, range.global,
                                          range.local, 0, nullptr, profile_slot(event)),
                   label_ + ", kernel " + name);
  profiled(name, event);
}

bool ClQueue::record(std::function<void()> op) {
  if (!recording_) return false;
  CaptureRecording::Step step;
  step.op = std::move(op);
  recording_->steps.push_back(std::move(step));
  return true;
}

void ClQueue::refuse_in_capture(const char* what) noexcept {
  if (recording_ && recording_->failure.empty()) recording_->failure = what;
}

std::unique_ptr<CapturedWork> ClQueue::capture(const std::function<void()>& step) {
  if (recording_) throw UsageError(label_ + ": capture() called while a capture is running");
  ensure_program();
  recording_ = std::make_unique<CaptureRecording>();
  try {
    step();
  } catch (...) {
    recording_.reset();
    throw;
  }
  std::unique_ptr<CaptureRecording> recording = std::move(recording_);
  if (!recording->failure.empty()) {
    log_warning(label_ + ": the step could not be captured (it makes " + recording->failure +
                "); running it directly each time.");
    return nullptr;
  }
  return std::make_unique<OpenClCapturedWork>(*this, std::move(recording));
}

}  // namespace trident::opencl
