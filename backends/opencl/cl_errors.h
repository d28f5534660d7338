// OpenCL and CLBlast status codes as names, and the check macros every OpenCL call goes through.
#pragma once
#include <string>

namespace trident::opencl {

// "CL_OUT_OF_RESOURCES" for -5, "CL_PLATFORM_NOT_FOUND_KHR" for -1001, "unknown OpenCL error" else.
const char* cl_error_name(int code);
// "kInvalidLeadDimA" for -1016; CLBlast shares the OpenCL codes above -1000 (named as OpenCL's).
const char* clblast_status_name(int code);

// "clFinish(queue) failed with CL_OUT_OF_RESOURCES (-5) at backends/opencl/x.cpp:12 on opencl:0 (name)".
std::string describe_cl_failure(const char* call, int code, const char* file, int line,
                                 const std::string& device);
// Throw BackendError (OutOfMemory for CL_MEM_OBJECT_ALLOCATION_FAILURE) with describe_cl_failure's text.
[[noreturn]] void throw_cl_error(const char* call, int code, const char* file, int line,
                                 const std::string& device);
[[noreturn]] void throw_clblast_error(const char* call, int code, const char* file, int line,
                                      const std::string& device);

}  // namespace trident::opencl

// `device` is a std::string naming the device ("opencl:0 (NVIDIA H100 80GB HBM3)").
#define TRIDENT_CL_CHECK(call, device)                                                     \
  do {                                                                                     \
    const int trident_cl_status_ = static_cast<int>(call);                                 \
    if (trident_cl_status_ != 0)                                                           \
      ::trident::opencl::throw_cl_error(#call, trident_cl_status_, __FILE__, __LINE__,     \
                                        (device));                                         \
  } while (0)

#define TRIDENT_CLBLAST_CHECK(call, device)                                                \
  do {                                                                                     \
    const int trident_clblast_status_ = static_cast<int>(call);                            \
    if (trident_clblast_status_ != 0)                                                      \
      ::trident::opencl::throw_clblast_error(#call, trident_clblast_status_, __FILE__,     \
                                             __LINE__, (device));                          \
  } while (0)
