// Small typed wrappers over clGetPlatformInfo / clGetDeviceInfo (strings trimmed of their NUL).
#pragma once
#include <CL/cl.h>

#include <string>

namespace trident::opencl {

inline std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  if (clGetPlatformInfo(platform, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string text(size, '\0');
  if (clGetPlatformInfo(platform, what, size, text.data(), nullptr) != CL_SUCCESS) return "";
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

inline std::string device_string(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string text(size, '\0');
  if (clGetDeviceInfo(device, what, size, text.data(), nullptr) != CL_SUCCESS) return "";
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

// A fixed-size device property (cl_ulong, cl_uint, cl_device_type ...); `fallback` if unreadable.
template <typename T>
T device_value(cl_device_id device, cl_device_info what, T fallback = T()) {
  T value{};
  return clGetDeviceInfo(device, what, sizeof(T), &value, nullptr) == CL_SUCCESS ? value : fallback;
}

}  // namespace trident::opencl
