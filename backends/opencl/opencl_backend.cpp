// The OpenCL backend's discovery: every device of every platform, numbered 0..n-1 across them
// (opening only those a DiscoveryScope allows).
#include <CL/cl.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "trident/backends/opencl/cl_errors.h"
#include "trident/backends/opencl/cl_info.h"
#include "trident/backends/opencl/gemm_engine.h"
#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/registry.h"

namespace trident {
namespace {

std::string device_type_name(cl_device_type type) {
  if (type & CL_DEVICE_TYPE_GPU) return "gpu";
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (type & CL_DEVICE_TYPE_CPU) return "cpu";
  return "other";
}

// "OpenCL 3.0 CUDA" -> true when the version is at least 1.2 (clEnqueueFillBuffer, -cl-std=CL1.2).
bool at_least_opencl_1_2(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "OpenCL %d.%d", &major, &minor) != 2) return false;
  return major > 1 || (major == 1 && minor >= 2);
}

std::string why(const char* call, cl_int status) {
  return std::string(call) + " returned " + opencl::cl_error_name(status) + " (" +
         std::to_string(status) + ")";
}

class OpenClBackend final : public Backend {
 public:
  std::string name() const override { return "opencl"; }

  std::vector<std::unique_ptr<Device>> discover(std::string& why_none) override {
    return discover_in_scope(DiscoveryScope{}, why_none);
  }

  // Listing platforms and devices creates nothing; an OpenClDevice creates a context, queue and
  // programs, so only the devices in `scope` become one. Numbers count every usable device.
  std::vector<std::unique_ptr<Device>> discover_in_scope(const DiscoveryScope& scope,
                                                         std::string& why_none) override {
    std::vector<std::unique_ptr<Device>> devices;
    cl_uint platform_count = 0;
    cl_int status = clGetPlatformIDs(0, nullptr, &platform_count);
    if (status != CL_SUCCESS || platform_count == 0) {
      why_none = status != CL_SUCCESS
                     ? why("clGetPlatformIDs", status) + ": no OpenCL driver (ICD) is installed"
                     : "no OpenCL platforms (install a vendor ICD, e.g. pocl-opencl-icd)";
      return devices;
    }
    std::vector<cl_platform_id> platforms(platform_count);
    status = clGetPlatformIDs(platform_count, platforms.data(), nullptr);
    if (status != CL_SUCCESS) {
      why_none = why("clGetPlatformIDs", status);
      return devices;
    }
    struct Usable {
      cl_platform_id platform;
      cl_device_id id;
      DeviceInfo info;
    };
    std::vector<Usable> usable;
    std::vector<std::string> skipped;
    for (cl_platform_id platform : platforms) {
      const std::string platform_name = opencl::platform_string(platform, CL_PLATFORM_NAME);
      cl_uint count = 0;
      status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
      if (status != CL_SUCCESS || count == 0) {
        skipped.push_back(platform_name + ": " + (status != CL_SUCCESS
                                                      ? why("clGetDeviceIDs", status)
                                                      : std::string("no devices")));
        continue;
      }
      std::vector<cl_device_id> ids(count);
      if ((status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids.data(), nullptr)) !=
          CL_SUCCESS) {
        skipped.push_back(platform_name + ": " + why("clGetDeviceIDs", status));
        continue;
      }
      for (cl_device_id id : ids) {
        DeviceInfo info = describe(platform, id, static_cast<int>(usable.size()));
        const std::string version = opencl::device_string(id, CL_DEVICE_VERSION);
        if (!at_least_opencl_1_2(version)) {
          skipped.push_back(info.name + ": " + version + " is older than OpenCL 1.2");
          continue;
        }
        usable.push_back({platform, id, std::move(info)});
      }
    }
    const std::vector<int> chosen =
        scope.devices_to_open("opencl", static_cast<int>(usable.size()));
    for (int index : chosen) {
      const Usable& u = usable[static_cast<size_t>(index)];
      try {
        devices.push_back(std::make_unique<opencl::OpenClDevice>(u.platform, u.id, u.info));
      } catch (const std::exception& e) {
        skipped.push_back(u.info.name + ": " + e.what());
      }
    }
    if (devices.empty() && !usable.empty() && chosen.empty()) {
      why_none = "none of the " + std::to_string(usable.size()) + " devices is opened: " +
                 scope.describe();
    } else if (devices.empty()) {
      why_none = "no usable OpenCL device";
      for (const std::string& s : skipped) why_none += "; " + s;
    }
    return devices;
  }

 private:
  static DeviceInfo describe(cl_platform_id platform, cl_device_id id, int index) {
    using opencl::device_string;
    DeviceInfo info;
    info.backend = "opencl";
    info.index = index;
    info.name = device_string(id, CL_DEVICE_NAME);
    info.vendor = device_string(id, CL_DEVICE_VENDOR);
    info.type = device_type_name(opencl::device_value<cl_device_type>(id, CL_DEVICE_TYPE));
    info.driver = device_string(id, CL_DRIVER_VERSION);
    info.detail = device_string(id, CL_DEVICE_VERSION) + "; " +
                  device_string(id, CL_DEVICE_OPENCL_C_VERSION) + "; platform " +
                  opencl::platform_string(platform, CL_PLATFORM_NAME) + " (" +
                  opencl::platform_string(platform, CL_PLATFORM_VERSION) + ")";
    // bf16 / fp16 tensors need no extension (16-bit storage through vload_half / vstore_half
    // and ushort bit rounding, float arithmetic); whether the device also has half arithmetic:
    const bool fp16 =
        device_string(id, CL_DEVICE_EXTENSIONS).find("cl_khr_fp16") != std::string::npos;
    info.detail += fp16 ? "; cl_khr_fp16" : "; no cl_khr_fp16";
    if (opencl::opencl_tensor_cores(id) == opencl::TensorCores::ptx) {
      const int cc = opencl::nvidia_compute_capability(id);
      info.detail += "; bf16/fp16 GEMMs on tensor cores (inline PTX mma, compute capability " +
                     std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ")";
    }
    info.memory_bytes = opencl::device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
    info.compute_units =
        static_cast<int>(opencl::device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
    return info;
  }
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend() { return std::make_unique<OpenClBackend>(); }

}  // namespace trident
