// The on-disk program binary cache (see program_cache.h for the rules it keeps).
#include "trident/backends/opencl/program_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

#include "trident/backends/opencl/cl_errors.h"
#include "trident/backends/opencl/cl_info.h"
#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/log.h"

namespace trident::opencl {
namespace fs = std::filesystem;

namespace {

std::atomic<uint64_t> g_hits{0}, g_compiles{0}, g_rejected{0}, g_writes{0};
constexpr char kMagic[8] = {'T', 'R', 'C', 'L', 'B', 'I', 'N', '1'};
struct EntryHeader {
  char magic[8];
  uint64_t key_hi, key_lo, payload_bytes, payload_hash;
};

uint64_t fnv1a(const void* data, size_t size, uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

// Each unusable directory is reported once per process, not once per program.
void warn_once(const std::string& dir, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(dir).second) return;
  log_warning("OpenCL program cache disabled for " + dir + " (" + why +
              "); kernels will be compiled at every start. Set TRIDENT_OPENCL_CACHE to a "
              "writable directory.");
}

struct Key { uint64_t hi, lo; };

Key program_key(cl_platform_id platform, cl_device_id device, const std::string& options,
                const std::string& source) {
  const std::string parts[] = {
      platform_string(platform, CL_PLATFORM_NAME), platform_string(platform, CL_PLATFORM_VERSION),
      device_string(device, CL_DEVICE_NAME), device_string(device, CL_DRIVER_VERSION),
      options, source};
  Key key{0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
  for (const std::string& part : parts) {  // the size separates fields: ("ab","c") != ("a","bc")
    const uint64_t size = part.size();
    key.hi = fnv1a(part.data(), part.size(), fnv1a(&size, sizeof size, key.hi));
    key.lo = fnv1a(part.data(), part.size(), fnv1a(&size, sizeof size, key.lo ^ 0x5bd1e995ull));
  }
  return key;
}

std::string key_text(Key key) {
  char text[40];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(key.hi),
                static_cast<unsigned long long>(key.lo));
  return text;
}

// The payload of a whole entry for `key`, or empty if the file is missing or damaged.
std::vector<unsigned char> read_entry(const std::string& path, Key key, bool& damaged) {
  damaged = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  EntryHeader header{};
  damaged = true;
  if (bytes.size() < sizeof header) return {};
  std::memcpy(&header, bytes.data(), sizeof header);
  std::vector<unsigned char> payload(bytes.begin() + sizeof header, bytes.end());
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 || header.key_hi != key.hi ||
      header.key_lo != key.lo || header.payload_bytes != payload.size() || payload.empty() ||
      header.payload_hash != fnv1a(payload.data(), payload.size(), 0xcbf29ce484222325ull))
    return {};
  damaged = false;
  return payload;
}

void write_entry(const std::string& dir, const std::string& path, Key key,
                 const std::vector<unsigned char>& payload) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(counter.fetch_add(1));
  EntryHeader header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.key_hi = key.hi;
  header.key_lo = key.lo;
  header.payload_bytes = payload.size();
  header.payload_hash = fnv1a(payload.data(), payload.size(), 0xcbf29ce484222325ull);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof header);
    out.write(reinterpret_cast<const char*>(payload.data()),
              static_cast<std::streamsize>(payload.size()));
    if (!out.flush()) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      warn_once(dir, "cannot write " + temp);
      return;
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    warn_once(dir, "cannot rename into " + path);
    return;
  }
  ++g_writes;
}

std::vector<unsigned char> program_binary(cl_program program, const std::string& device_label) {
  size_t size = 0;
  TRIDENT_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr),
                   device_label);
  std::vector<unsigned char> binary(size);
  unsigned char* data = binary.data();
  if (size > 0)
    TRIDENT_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr),
                     device_label);
  return binary;
}

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  if (size > 0) clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

bool kernels_present(cl_program program, const std::vector<const char*>& kernel_names) {
  for (const char* name : kernel_names) {
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(program, name, &status);
    if (status != CL_SUCCESS || !kernel) return false;
    clReleaseKernel(kernel);
  }
  return true;
}

// The program from a cached binary, or nullptr if the driver refuses it.
cl_program load_binary(cl_context context, cl_device_id device, const std::string& options,
                       const std::vector<unsigned char>& binary,
                       const std::vector<const char*>& kernel_names) {
  const size_t size = binary.size();
  const unsigned char* data = binary.data();
  cl_int binary_status = CL_SUCCESS, status = CL_SUCCESS;
  cl_program program =
      clCreateProgramWithBinary(context, 1, &device, &size, &data, &binary_status, &status);
  if (status != CL_SUCCESS || binary_status != CL_SUCCESS || !program) {
    if (program) clReleaseProgram(program);
    return nullptr;
  }
  if (clBuildProgram(program, 1, &device, options.c_str(), nullptr, nullptr) != CL_SUCCESS ||
      !kernels_present(program, kernel_names)) {
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

}  // namespace

ProgramCacheStats program_cache_stats() {
  return ProgramCacheStats{g_hits.load(), g_compiles.load(), g_rejected.load(), g_writes.load()};
}

std::string program_cache_directory() {
  fs::path dir;
  if (auto explicit_dir = env_string("TRIDENT_OPENCL_CACHE")) {
    if (*explicit_dir == "off") return "";  // caching turned off on purpose: no warning
    dir = *explicit_dir;
  }
  else if (auto xdg = env_string("XDG_CACHE_HOME")) dir = fs::path(*xdg) / "trident" / "opencl";
  else if (auto home = env_string("HOME")) dir = fs::path(*home) / ".cache" / "trident" / "opencl";
  else return "";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    warn_once(dir.string(), "cannot create the directory");
    return "";
  }
  return dir.string();
}

std::string program_cache_path(cl_platform_id platform, cl_device_id device,
                               const std::string& options, const std::string& source) {
  const std::string dir = program_cache_directory();
  if (dir.empty()) return "";
  return (fs::path(dir) / (key_text(program_key(platform, device, options, source)) + ".clbin"))
      .string();
}

cl_program build_program_cached(cl_context context, cl_platform_id platform, cl_device_id device,
                                const std::string& options, const std::string& source,
                                const std::vector<const char*>& kernel_names,
                                const std::string& device_label) {
  const std::string path = program_cache_path(platform, device, options, source);
  const Key key = program_key(platform, device, options, source);
  if (!path.empty()) {
    bool damaged = false;
    const std::vector<unsigned char> binary = read_entry(path, key, damaged);
    cl_program program =
        binary.empty() ? nullptr : load_binary(context, device, options, binary, kernel_names);
    if (program) {
      ++g_hits;
      return program;
    }
    if (damaged || !binary.empty()) {  // never trusted again: delete, then rebuild below
      ++g_rejected;
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  }

  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &text, &length, &status);
  TRIDENT_CL_CHECK(status, device_label);
  status = clBuildProgram(program, 1, &device, options.c_str(), nullptr, nullptr);
  if (status != CL_SUCCESS) {
    const std::string log = build_log(program, device);
    clReleaseProgram(program);
    throw BackendError("OpenCL kernels failed to build on " + device_label + ": " +
                       cl_error_name(status) + " (" + std::to_string(status) +
                       "), options '" + options + "'. Build log:\n" + log);
  }
  ++g_compiles;
  if (!path.empty()) {
    const std::vector<unsigned char> binary = program_binary(program, device_label);
    if (!binary.empty()) write_entry(fs::path(path).parent_path().string(), path, key, binary);
  }
  return program;
}

}  // namespace trident::opencl
