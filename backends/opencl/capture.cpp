// Capture for OpenCL: a step recorded once as kernel objects with their arguments already set
// (one object per launch, so later launches do not disturb them) plus re-run CLBlast calls, fills
// and copies; replay() enqueues them in order with no argument setting and no Trident logic.
//
// A step that transfers to or from the host, synchronizes, allocates or frees cannot be
// recorded: capture() then returns nullptr (nothing of the step ran) and callers run it directly.
#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"
#include "trident/core/log.h"

namespace trident::opencl {

namespace {

class OpenClCapturedWork final : public CapturedWork {
 public:
  OpenClCapturedWork(cl_command_queue queue, std::string label, KernelProfile* profile,
                     std::unique_ptr<CaptureRecording> recording)
      : queue_(queue), label_(std::move(label)), profile_(profile),
        recording_(std::move(recording)) {}

  void replay() override {
    for (const CaptureRecording::Step& s : recording_->steps) {
      if (!s.kernel) {
        s.op();
        continue;
      }
      cl_event event = nullptr;
      TRIDENT_CL_CHECK(clEnqueueNDRangeKernel(queue_, s.kernel, s.dims, nullptr, s.global,
                                              s.local, 0, nullptr, profile_ ? &event : nullptr),
                       label_ + ", kernel " + s.name + " (replay)");
      if (profile_) profile_->add(s.name, event);
    }
  }

 private:
  cl_command_queue queue_;
  std::string label_;
  KernelProfile* profile_;  // the device's, or null; like queue_, valid while the device lives
  std::unique_ptr<CaptureRecording> recording_;
};

}  // namespace

cl_kernel OpenClDevice::kernel_for_launch(cl_program program, cl_kernel shared,
                                          const char* name) {
  if (!recording_) return shared;
  cl_int status = CL_SUCCESS;
  cl_kernel fresh = clCreateKernel(program, name, &status);
  TRIDENT_CL_CHECK(status, label_ + ", kernel " + name + " (for a capture)");
  recording_->kernels.push_back(fresh);
  return fresh;
}

void OpenClDevice::submit(cl_kernel kernel, cl_uint dims, const size_t* global,
                          const size_t* local, const char* name) {
  if (recording_) {
    CaptureRecording::Step step;
    step.kernel = kernel;
    step.dims = dims;
    for (cl_uint d = 0; d < dims; ++d) {
      step.global[d] = global[d];
      step.local[d] = local[d];
    }
    step.name = name;
    recording_->steps.push_back(std::move(step));
    return;
  }
  cl_event event = nullptr;
  TRIDENT_CL_CHECK(clEnqueueNDRangeKernel(queue_, kernel, dims, nullptr, global, local, 0,
                                          nullptr, profile_slot(event)),
                   label_ + ", kernel " + name);
  if (profile_) profile_->add(name, event);
}

bool OpenClDevice::record(std::function<void()> op) {
  if (!recording_) return false;
  CaptureRecording::Step step;
  step.op = std::move(op);
  recording_->steps.push_back(std::move(step));
  return true;
}

void OpenClDevice::refuse_in_capture(const char* what) noexcept {
  if (recording_ && recording_->failure.empty()) recording_->failure = what;
}

std::unique_ptr<CapturedWork> OpenClDevice::capture(const std::function<void()>& step) {
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
    log_warning(label_ + ": the step could not be captured (it calls " + recording->failure +
                "); running it directly each time.");
    return nullptr;
  }
  return std::make_unique<OpenClCapturedWork>(queue_, label_, profile_.get(),
                                              std::move(recording));
}

}  // namespace trident::opencl
