// The CUDA backend: finds the GPUs at run time and makes one CudaDevice for each; a machine with
// no driver or no GPU reports why and has no CUDA devices (never an error by itself).
#include <cstdint>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/backends/cuda/cuda_device.h"
#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/log.h"
#include "trident/core/registry.h"

namespace trident {
namespace cuda {
namespace {

std::string version_text(int version) {  // 12080 -> "12.8"
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Said beside every CUDA device (and in the reason for none) when this build has no NCCL, since
// several GPUs then sum gradients through host memory, much slower than NCCL.
#ifdef TRIDENT_HAVE_NCCL
constexpr const char* kNcclNote = "";
#else
constexpr const char* kNcclNote = "built without NCCL (several GPUs sum through host memory)";
#endif

std::string with_nccl_note(std::string text) {
  if (*kNcclNote) text += (text.empty() ? "" : "; ") + std::string(kNcclNote);
  return text;
}

std::string why_no_devices(cudaError_t status) {
  const std::string detail = " (" + describe_status(status) + ")";
  switch (status) {
    case cudaErrorNoDevice:
      return "no CUDA GPU found" + detail;
    case cudaErrorInsufficientDriver: {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      return "no CUDA driver, or one older than this build's CUDA runtime " +
             version_text(runtime) + detail;
    }
    default:
      return "CUDA could not be initialised" + detail;
  }
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  std::vector<std::unique_ptr<Device>> discover(std::string& why_none) override {
    return discover_in_scope(DiscoveryScope{}, why_none);
  }

  // Counting and describing GPUs creates no context; a CudaDevice does (stream, cuBLAS handles,
  // workspace), so only the GPUs in `scope` become one.
  std::vector<std::unique_ptr<Device>> discover_in_scope(const DiscoveryScope& scope,
                                                         std::string& why_none) override {
    std::vector<std::unique_ptr<Device>> devices;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      why_none = with_nccl_note(why_no_devices(status));
      return devices;
    }
    if (count == 0) {
      why_none = with_nccl_note("no CUDA GPU found");
      return devices;
    }
    int driver = 0, runtime = 0;
    TRIDENT_CUDA_CHECK(cudaDriverGetVersion(&driver), -1);
    TRIDENT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime), -1);
    const bool tf32 = env_flag("TRIDENT_CUDA_TF32", false);
    std::string failures;
    const std::vector<int> ordinals = scope.devices_to_open("cuda", count);
    if (ordinals.empty()) {
      why_none = "none of the " + std::to_string(count) + " GPUs is opened: " + scope.describe();
      return devices;
    }
    for (int ordinal : ordinals) {
      try {
        cudaDeviceProp prop{};
        TRIDENT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal), ordinal);
        DeviceInfo info;
        info.backend = "cuda";
        info.index = ordinal;
        info.name = prop.name;
        info.vendor = "NVIDIA";
        info.type = "gpu";
        info.driver = "CUDA driver " + version_text(driver) + ", runtime " + version_text(runtime);
        // "tf32" appears only when it is on: the conformance suite keys its tolerance on it.
        const std::string capability = "compute capability " + std::to_string(prop.major) + "." +
                                       std::to_string(prop.minor);
        info.detail = with_nccl_note(
            capability + (tf32 ? ", TF32 tensor-core GEMM (TRIDENT_CUDA_TF32=1)" : ""));
        info.memory_bytes = prop.totalGlobalMem;
        info.compute_units = prop.multiProcessorCount;
        // No element limit: every kernel indexes in int64 wherever an op may pass 2^31
        // elements (kernels/cuda/launch.cuh's fits_int32 picks int32 only where it fits);
        // cuBLAS's 32-bit sizes are checked per GEMM (backends/cuda/cublas_gemm.cpp).
        info.limits.max_elements = INT64_MAX;
        devices.push_back(std::make_unique<CudaDevice>(ordinal, std::move(info), tf32));
      } catch (const Error& e) {
        failures += (failures.empty() ? "" : "; ") + std::string("cuda:") +
                    std::to_string(ordinal) + ": " + e.what();
      }
    }
    if (devices.empty()) {
      why_none = with_nccl_note(failures);
    } else if (!failures.empty()) {
      log_warning("some CUDA GPUs are unusable and left out: " + failures);
    }
    return devices;
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

}  // namespace trident
