// Builds OpenCL programs through an on-disk cache of compiled binaries, keyed per device and driver.
//
// Directory: TRIDENT_OPENCL_CACHE ("off": no cache), else $XDG_CACHE_HOME/trident/opencl, else
// ~/.cache/trident/opencl.
// Key: a 128-bit hash of (platform name + version, device name, driver version, build options,
// source). An entry is a small header (magic, key, payload size and checksum) plus the driver's
// binary; one that fails its checksum, or that the driver will not load or build, is deleted and
// rebuilt from source. Writes go to a temporary file renamed into place, so readers never see a
// half-written entry. An unusable directory means no cache, with one warning in the log (core/log.h).
#pragma once
#include <CL/cl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trident::opencl {

// Process-wide counters, so tests (and curious users) can see what the cache did.
struct ProgramCacheStats {
  uint64_t hits = 0;        // programs loaded from a cached binary
  uint64_t compiles = 0;    // programs compiled from source
  uint64_t rejected = 0;    // cache entries found corrupt or unloadable, deleted
  uint64_t writes = 0;      // entries written
};
ProgramCacheStats program_cache_stats();

// The directory now in effect ("" when caching is off or impossible).
std::string program_cache_directory();
// Where the entry for this program would live ("" when caching is off).
std::string program_cache_path(cl_platform_id platform, cl_device_id device,
                               const std::string& options, const std::string& source);

// A built program for `device`. `kernel_names` are created once as a check that a cached binary
// is whole. Throws BackendError with the build log when the source does not compile.
cl_program build_program_cached(cl_context context, cl_platform_id platform, cl_device_id device,
                                const std::string& options, const std::string& source,
                                const std::vector<const char*>& kernel_names,
                                const std::string& device_label);

}  // namespace trident::opencl
