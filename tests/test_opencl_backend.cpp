// OpenCL-specific checks (the ops themselves are in the conformance suite): the on-disk program
// cache across process starts, the check macro's messages, discovery and device selection.
//
// Process starts are real: the test re-runs this binary with a hidden test case as the child, so
// every cache check sees what a second `trident train` would. Only the last section needs the
// backend's internals (TRIDENT_HAVE_OPENCL); the rest works through the Device interface.
#include <catch2/catch.hpp>

#include "trident/core/allocator.h"

#include <algorithm>
#include <array>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"

#ifdef TRIDENT_HAVE_OPENCL
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120  // the library's own setting (cmake/TridentOpenCL.cmake)
#endif
#include "trident/backends/opencl/cl_errors.h"
#include "trident/backends/opencl/program_cache.h"
#endif

using namespace trident;
namespace fs = std::filesystem;

namespace {

const DeviceRegistry::BackendEntry* opencl_entry() {
  for (const auto& entry : DeviceRegistry::global().backends())
    if (entry.name == "opencl") return &entry;
  return nullptr;
}

Device* first_opencl_device() {
  const auto* entry = opencl_entry();
  return entry && !entry->devices.empty() ? entry->devices.front().get() : nullptr;
}

// A fresh empty directory under the system temp dir, removed when the object goes.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "trident-ocl-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// Sets (or with nullptr unsets) an environment variable for one scope, then restores it.
struct ScopedEnv {
  std::string name, saved;
  bool was_set;
  ScopedEnv(const char* variable, const char* value) : name(variable) {
    const char* old = std::getenv(variable);
    was_set = old != nullptr;
    if (was_set) saved = old;
    if (value) setenv(variable, value, 1);
    else unsetenv(variable);
  }
  ~ScopedEnv() {
    if (was_set) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

std::string this_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

struct ChildRun {
  int status = -1;
  std::string output;
};

// Runs this test binary's hidden test `tag` with `env` ("A=1 B=2", "-u NAME" to unset) prepended.
ChildRun run_child(const std::string& env, const std::string& tag, const fs::path& log) {
  const std::string command = "env " + env + " '" + this_executable() + "' '" + tag +
                              "' > '" + log.string() + "' 2>&1";
  ChildRun run;
  run.status = std::system(command.c_str());
  std::ifstream in(log);
  run.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

std::vector<fs::path> cache_entries(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec))
    if (item.path().extension() == ".clbin") found.push_back(item.path());
  return found;
}

// An entry left alone keeps its inode; a rewrite renames a new file over it (a new inode while
// the old file still exists; after a delete the inode number may be reused, so no test uses that).
ino_t inode_of(const fs::path& file) {
  struct stat info {};
  REQUIRE(::stat(file.c_str(), &info) == 0);
  return info.st_ino;
}

// The child prints "opencl-cache-child: ok hits=H compiles=C rejected=R" (counts need internals).
bool child_reports(const ChildRun& run, const std::string& counts) {
  return run.status == 0 &&
         run.output.find("opencl-cache-child: ok" + counts) != std::string::npos;
}

}  // namespace

// The child side of the cache tests: run one kernel on opencl:0 and report what the cache did.
TEST_CASE("opencl cache child: run one kernel", "[.opencl-cache-child]") {
  Device* device = first_opencl_device();
  REQUIRE(device != nullptr);
  const float input[4] = {-1.0f, 2.0f, -3.0f, 4.0f};
  Tensor buffer = Tensor::empty(*device, {8});
  const Tensor x = buffer.view(0, {4}), y = buffer.view(4, {4});
  x.copy_from_host(input, sizeof input);
  device->unary_forward(UnaryOp::relu, x, y);
  float output[4] = {};
  y.to_host(output, sizeof output);
  REQUIRE(output[0] == 0.0f);
  REQUIRE(output[3] == 4.0f);
  std::string counts;
#ifdef TRIDENT_HAVE_OPENCL
  const auto stats = opencl::program_cache_stats();
  counts = " hits=" + std::to_string(stats.hits) + " compiles=" + std::to_string(stats.compiles) +
           " rejected=" + std::to_string(stats.rejected);
#endif
  std::printf("opencl-cache-child: ok%s\n", counts.c_str());
}

TEST_CASE("opencl: the program cache survives restarts and rebuilds damaged entries",
          "[opencl][program-cache]") {
  if (!first_opencl_device()) {
    WARN("no OpenCL device: " << (opencl_entry() ? opencl_entry()->why_none : "not compiled in"));
    return;
  }
  REQUIRE(!this_executable().empty());
  TempDir dir;
  const fs::path cache = dir.path / "cache", log = dir.path / "child.log";
  const std::string env = "TRIDENT_OPENCL_CACHE='" + cache.string() + "'";
  const char* child = "[opencl-cache-child]";
#ifdef TRIDENT_HAVE_OPENCL
  const bool counted = true;
#else
  const bool counted = false;
#endif
  auto expect = [&](const ChildRun& run, const char* counts) {
    INFO(run.output);
    CHECK(child_reports(run, counted ? counts : ""));
  };

  // First start: compiled from source and written to the directory the variable names.
  expect(run_child(env, child, log), " hits=0 compiles=1 rejected=0");
  auto entries = cache_entries(cache);
  REQUIRE(entries.size() == 1);
  const fs::path entry = entries.front();
  const auto entry_size = fs::file_size(entry);
  const ino_t written = inode_of(entry);

  SECTION("a second start loads the binary and leaves the entry alone") {
    expect(run_child(env, child, log), " hits=1 compiles=0 rejected=0");
    CHECK(inode_of(entry) == written);
    CHECK(cache_entries(cache).size() == 1);
  }
  SECTION("flipped bytes are detected, the entry is rebuilt, and the rebuilt one is trusted") {
    {
      std::fstream file(entry, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(entry_size / 2));
      const char garbage[16] = "not a binary!!!";
      file.write(garbage, sizeof garbage);
    }
    expect(run_child(env, child, log), " hits=0 compiles=1 rejected=1");
    REQUIRE(cache_entries(cache).size() == 1);
    std::ifstream in(entry, std::ios::binary);
    const std::string rewritten((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
    CHECK(rewritten.find("not a binary!!!") == std::string::npos);
    const ino_t rebuilt = inode_of(entry);
    expect(run_child(env, child, log), " hits=1 compiles=0 rejected=0");
    CHECK(inode_of(entry) == rebuilt);
  }
  SECTION("a truncated entry is detected and rebuilt") {
    fs::resize_file(entry, 20);
    expect(run_child(env, child, log), " hits=0 compiles=1 rejected=1");
    CHECK(fs::file_size(entry) > 20);
    expect(run_child(env, child, log), " hits=1 compiles=0 rejected=0");
  }
  SECTION("a leftover temporary file from a crashed writer is ignored") {
    std::ofstream(entry.string() + ".tmp.1.0") << "half written";
    expect(run_child(env, child, log), " hits=1 compiles=0 rejected=0");
  }
}

TEST_CASE("opencl: the program cache falls back to $XDG_CACHE_HOME and can be turned off",
          "[opencl][program-cache]") {
  if (!first_opencl_device()) return;
  TempDir dir;
  const fs::path log = dir.path / "child.log";
  const char* child = "[opencl-cache-child]";
  const std::string xdg = "XDG_CACHE_HOME='" + dir.path.string() + "'";
  const ChildRun fallback = run_child("-u TRIDENT_OPENCL_CACHE " + xdg, child, log);
  INFO(fallback.output);
  CHECK(child_reports(fallback, ""));
  CHECK(cache_entries(dir.path / "trident" / "opencl").size() == 1);

  const ChildRun off = run_child("TRIDENT_OPENCL_CACHE=off HOME='" + dir.path.string() + "' " +
                                     "XDG_CACHE_HOME='" + (dir.path / "other").string() + "'",
                                 child, log);
  INFO(off.output);
  CHECK(child_reports(off, ""));
  CHECK(!fs::exists(dir.path / "other" / "trident"));  // (PoCL keeps its own cache there)
}

TEST_CASE("opencl: every device is listed with its properties", "[opencl][registry]") {
  const auto* entry = opencl_entry();
  if (!entry) return;  // not compiled in
  const std::string listing = DeviceRegistry::global().describe();
  if (entry->devices.empty()) {  // e.g. CI without an ICD: the reason must be given
    CHECK(!entry->why_none.empty());
    CHECK(listing.find("opencl: 0 devices (" + entry->why_none + ")") != std::string::npos);
    return;
  }
  for (size_t i = 0; i < entry->devices.size(); ++i) {
    const DeviceInfo& info = entry->devices[i]->info();
    INFO(info.id() << " " << info.name);
    CHECK(info.backend == "opencl");
    CHECK(info.index == static_cast<int>(i));
    CHECK(!info.name.empty());
    CHECK(!info.vendor.empty());
    CHECK((info.type == "gpu" || info.type == "cpu" || info.type == "accelerator" ||
           info.type == "other"));
    CHECK(!info.driver.empty());
    CHECK(info.detail.find("OpenCL") != std::string::npos);
    CHECK(info.memory_bytes > 0);
    CHECK(info.compute_units > 0);
    CHECK(&DeviceRegistry::global().device(info.id()) == entry->devices[i].get());
    CHECK(listing.find("  " + info.id() + "  " + info.name) != std::string::npos);
  }
}

TEST_CASE("opencl: a machine without an OpenCL driver reports 0 devices and why",
          "[opencl][registry]") {
  if (!opencl_entry()) return;
  TempDir no_vendors;  // the ICD loader (ocl-icd, Khronos) then finds no platform
  const ChildRun run = run_child("OCL_ICD_VENDORS='" + no_vendors.path.string() +
                                     "' OCL_ICD_FILENAMES=",
                                 "[opencl-describe-child]", no_vendors.path / "child.log");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK(run.output.find("opencl: 0 devices (") != std::string::npos);
  CHECK(run.output.find("cpu: 1 device") != std::string::npos);
}

TEST_CASE("opencl describe child: print the registry", "[.opencl-describe-child]") {
  std::printf("%s", DeviceRegistry::global().describe().c_str());
}

TEST_CASE("opencl: TRIDENT_BACKEND=opencl picks the first GPU, else the first device",
          "[opencl][registry]") {
  const auto* entry = opencl_entry();
  if (!entry || entry->devices.empty()) return;
  Device* expected = entry->devices.front().get();
  for (const auto& d : entry->devices)
    if (d->info().type == "gpu") {
      expected = d.get();
      break;
    }
  {
    ScopedEnv backend("TRIDENT_BACKEND", "opencl");
    CHECK(&DeviceRegistry::global().default_device() == expected);
  }
  CHECK_THROWS_AS(DeviceRegistry::global().device("opencl:" +
                                                  std::to_string(entry->devices.size())),
                  DeviceNotFound);
}

TEST_CASE("opencl: a failed call names the call, file, line, device and error",
          "[opencl][errors]") {
  Device* device = first_opencl_device();
  if (!device) return;
  Tensor small = Tensor::empty(*device, {64});
  std::vector<unsigned char> host(1 << 20);
  std::string message;
  try {
    device->copy_to_host(host.data(), small.memory(), host.size());  // reads past the end
  } catch (const BackendError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("clEnqueueReadBuffer(") != std::string::npos);
  CHECK(message.find("CL_INVALID_VALUE (-30)") != std::string::npos);
  CHECK(message.find("cl_queue.cpp:") != std::string::npos);
  CHECK(message.find(device->info().id() + " (" + device->info().name + ")") != std::string::npos);

  // More than the whole device is an OutOfMemory that says what the device has, also on drivers
  // that allocate lazily (NVIDIA's accepts any size until first use).
  // (The caching pool rounds the request up before the device sees it.)
  const size_t too_much = device->info().memory_bytes * 4;
  CHECK_THROWS_WITH(device->allocator().allocate(too_much),
                    Catch::Contains("cannot allocate ") &&
                        Catch::Contains(std::to_string(device->info().memory_bytes) +
                                        " bytes of global memory") &&
                        Catch::Contains(device->info().id()));
}

#ifdef TRIDENT_HAVE_OPENCL
TEST_CASE("opencl: error names for OpenCL and CLBlast codes", "[opencl][errors]") {
  using opencl::cl_error_name;
  using opencl::clblast_status_name;
  CHECK(std::string(cl_error_name(-5)) == "CL_OUT_OF_RESOURCES");
  CHECK(std::string(cl_error_name(-11)) == "CL_BUILD_PROGRAM_FAILURE");
  CHECK(std::string(cl_error_name(-54)) == "CL_INVALID_WORK_GROUP_SIZE");
  CHECK(std::string(cl_error_name(-1001)) == "CL_PLATFORM_NOT_FOUND_KHR");
  CHECK(std::string(cl_error_name(-12345)) == "unknown OpenCL error");
  CHECK(std::string(clblast_status_name(-5)) == "CL_OUT_OF_RESOURCES");
  CHECK(std::string(clblast_status_name(-1016)) == "kInvalidLeadDimA");
  CHECK(std::string(clblast_status_name(-2049)) == "kInvalidBatchCount");

  std::string message;
  const int line = __LINE__ + 2;
  try {
    TRIDENT_CL_CHECK(clReleaseKernel(nullptr), std::string("opencl:7 (test device)"));
  } catch (const BackendError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("clReleaseKernel(nullptr) failed with CL_INVALID_KERNEL (-48) at ") == 0);
  CHECK(message.find("test_opencl_backend.cpp:" + std::to_string(line) +
                     " on opencl:7 (test device)") != std::string::npos);
  auto allocation_failure = [] { TRIDENT_CL_CHECK(CL_MEM_OBJECT_ALLOCATION_FAILURE, "d"); };
  CHECK_THROWS_AS(allocation_failure(), OutOfMemory);
  auto clblast_failure = [] { TRIDENT_CLBLAST_CHECK(-1017, "d"); };
  CHECK_THROWS_WITH(clblast_failure(),
                    Catch::Contains("kInvalidDimension (-1017)") && Catch::Contains("CLBlast"));
}

TEST_CASE("opencl: a kernel that fails to build shows the build log", "[opencl][errors]") {
  Device* device = first_opencl_device();
  if (!device) return;
  cl_device_id id = nullptr;
  {  // the registry's device ids, in order: the first device of the first platform with any
    cl_platform_id platforms[16];
    cl_uint count = 0;
    REQUIRE(clGetPlatformIDs(16, platforms, &count) == CL_SUCCESS);
    for (cl_uint p = 0; p < count && !id; ++p)
      if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, &id, nullptr) != CL_SUCCESS)
        id = nullptr;
  }
  REQUIRE(id != nullptr);
  cl_platform_id platform = nullptr;
  REQUIRE(clGetDeviceInfo(id, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr) ==
          CL_SUCCESS);
  cl_int status = CL_SUCCESS;
  cl_context context = clCreateContext(nullptr, 1, &id, nullptr, nullptr, &status);
  REQUIRE(status == CL_SUCCESS);
  TempDir dir;  // nothing cached from earlier runs, nothing left behind
  ScopedEnv cache_dir("TRIDENT_OPENCL_CACHE", dir.path.c_str());
  const std::string broken =
      "__kernel void broken(__global float* x) { x[0] = undeclared_name_42; }\n";
  std::string message;
  try {
    clReleaseProgram(opencl::build_program_cached(context, platform, id, "-cl-std=CL1.2", broken,
                                                  {"broken"}, "opencl:test"));
  } catch (const BackendError& e) {
    message = e.what();
  }
  clReleaseContext(context);
  INFO(message);
  CHECK(message.find("failed to build on opencl:test") != std::string::npos);
  CHECK(message.find("CL_BUILD_PROGRAM_FAILURE") != std::string::npos);
  CHECK(message.find("Build log:") != std::string::npos);
  CHECK(message.find("undeclared_name_42") != std::string::npos);  // the compiler's own words
  CHECK(cache_entries(dir.path).empty());
}
#endif

// ---- the backend's parts, on devices made for the test ------------------------------------------
// A device reads its GEMM policy (TRIDENT_OPENCL_OWN_GEMM, _GEMM_TILE, _SPLIT_K) once, when it is
// made, so these tests set the variables and then make fresh devices through the backend's
// discovery (compiled programs come from the on-disk cache after the first).
#ifdef TRIDENT_HAVE_OPENCL
#include "trident/kernels/reference/reference_ops.h"
#include "tests/gemm_check.h"

namespace trident {
std::unique_ptr<Backend> make_opencl_backend();  // backends/opencl/opencl_backend.cpp
}

namespace {

// The OpenCL devices as discovered now; `why` gets the backend's reason when there are none.
std::vector<std::unique_ptr<Device>> fresh_opencl_devices(std::string* why = nullptr) {
  std::string reason;
  std::vector<std::unique_ptr<Device>> devices = make_opencl_backend()->discover(reason);
  if (why) *why = reason;
  return devices;
}

}  // namespace

// The conformance suite runs Device::gemm in the default (auto) mode, which on these small shapes
// is the own kernel with the tile picked for the device on a GPU and CLBlast on PoCL; here every
// tile shape is forced, and CLBlast ("never") is checked on the same cases, at awkward sizes,
// offsets and strides, with the epilogues each path applies (bias and ReLU fused in the own
// kernel and the split-K sum, other activations in a pass after it).
TEST_CASE("opencl: the own tiled GEMM at every tile shape, transpose, bias kind and offset, split-K",
          "[opencl][gemm]") {
  if (!first_opencl_device()) {
    WARN("SKIPPED: no OpenCL device");
    return;
  }
  std::vector<testing::GemmCase> cases = {
      {1, 1, 1, 1.0f, 0.0f, BiasKind::none, false, 0, 0},
      {17, 31, 0, 1.0f, 0.5f, BiasKind::per_row, true, 2, 1},        // k == 0: C = beta C + bias
      {65, 130, 47, 0.5f, 0.0f, BiasKind::per_column, true, 0, 3},    // edge tiles everywhere
      {129, 33, 257, -1.5f, 0.75f, BiasKind::per_row, false, 3, 1},   // beta, lda > cols
      {200, 70, 100, 1.0f, 0.0f, BiasKind::per_column, true, 0, 0},   // a seed-model shape
      {37, 11, 2103, 1.0f, 0.5f, BiasKind::per_column, false, 0, 5},  // split-K, tail of 3
      {3, 300, 9, 2.0f, 1.0f, BiasKind::none, true, 5, 7},
  };
  // Activations other than ReLU: after the own kernel, in the split-K sum, after CLBlast.
  const UnaryOp others[] = {UnaryOp::tanh, UnaryOp::gelu, UnaryOp::sigmoid};
  for (int i = 0; i < 3; ++i) {
    testing::GemmCase c = cases[size_t(2 + i * 2)];
    c.relu = false;
    c.activation = others[i];
    cases.push_back(c);
  }
  // Own kernel mode, tile, split-K slices (forced: every product with K >= 2S is split, its
  // epilogue - beta, bias, activation, ldc - then done by the split_k_sum kernel).
  const char* modes[][3] = {{"always", "32", nullptr},  {"always", "64", nullptr},
                            {"always", "128", nullptr}, {"always", "32x128", nullptr},
                            {"auto", nullptr, nullptr}, {"never", nullptr, nullptr},
                            {"always", nullptr, "3"},   {"never", nullptr, "4"}};
  for (const auto& [mode, tile, split] : modes) {
    ScopedEnv own("TRIDENT_OPENCL_OWN_GEMM", mode), forced("TRIDENT_OPENCL_GEMM_TILE", tile),
        slices("TRIDENT_OPENCL_SPLIT_K", split);
    INFO("TRIDENT_OPENCL_OWN_GEMM=" << mode << " TRIDENT_OPENCL_GEMM_TILE=" << (tile ? tile : "")
                                    << " TRIDENT_OPENCL_SPLIT_K=" << (split ? split : ""));
    for (const auto& device : fresh_opencl_devices()) {
      uint32_t seed = 900;
      for (const testing::GemmCase& c : cases)
        for (bool ta : {false, true})
          for (bool tb : {false, true}) testing::check_gemm(*device, c, ta, tb, seed += 10);
    }
  }
}

TEST_CASE("opencl: the GEMM policy is read once when a device is made; a bad value names it",
          "[opencl][gemm]") {
  if (!first_opencl_device()) return;
  for (const auto& [variable, value] :
       {std::pair<const char*, const char*>{"TRIDENT_OPENCL_OWN_GEMM", "sometimes"},
        {"TRIDENT_OPENCL_GEMM_TILE", "48"}, {"TRIDENT_OPENCL_SPLIT_K", "many"}}) {
    ScopedEnv bad(variable, value);
    std::string why;
    CHECK(fresh_opencl_devices(&why).empty());
    INFO(why);
    CHECK(why.find(variable) != std::string::npos);
    CHECK(why.find(value) != std::string::npos);
  }
  // A device made before the variable changed keeps the policy it read (no error at the GEMM).
  std::vector<std::unique_ptr<Device>> devices = fresh_opencl_devices();
  REQUIRE_FALSE(devices.empty());
  ScopedEnv later("TRIDENT_OPENCL_OWN_GEMM", "sometimes");
  testing::check_gemm(*devices.front(), {5, 6, 7, 1.0f, 0.0f, BiasKind::per_column, true, 0, 0},
                      false, false, 17);
}

namespace {

// conv2d forward, then backward twice (the second after the first overwrote the columns with
// the column gradient) on `d`: y, dx, dw, db in one vector.
std::vector<float> conv_results(Device& d, const Conv2dShape& s) {
  testing::OffsetBuffer x(d, testing::random_floats(size_t(s.input_numel()), 1), 1),
      w(d, testing::random_floats(size_t(s.weight_numel()), 2), 2),
      b(d, testing::random_floats(size_t(s.out_channels), 3), 3),
      dy(d, testing::random_floats(size_t(s.output_numel()), 4), 1),
      y(d, std::vector<float>(size_t(s.output_numel())), 2),
      dx(d, std::vector<float>(size_t(s.input_numel())), 3),
      dw(d, std::vector<float>(size_t(s.weight_numel())), 1),
      db(d, std::vector<float>(size_t(s.out_channels)), 2),
      workspace(d, std::vector<float>(d.conv2d_workspace_bytes(s) / sizeof(float) + 1), 0);
  d.conv2d_forward(s, x.tensor(), w.tensor(), b.tensor(), y.tensor(), workspace.tensor());
  d.conv2d_backward(s, x.tensor(), w.tensor(), dy.tensor(), dx.tensor(), dw.tensor(),
                    db.tensor(), workspace.tensor());
  const std::vector<float> first_dw = dw.values();
  d.conv2d_backward(s, x.tensor(), w.tensor(), dy.tensor(), dx.tensor(), dw.tensor(),
                    db.tensor(), workspace.tensor());
  CHECK(dw.values() == first_dw);
  std::vector<float> all = y.values();
  for (const auto* part : {&dx, &dw, &db}) {
    const std::vector<float> v = part->values();
    all.insert(all.end(), v.begin(), v.end());
    CHECK(part->guard_damage() == 0);
  }
  CHECK(y.guard_damage() == 0);
  return all;
}

}  // namespace

TEST_CASE("opencl: convolutions through the own GEMM (NCHW epilogue, split-K tail in one launch)",
          "[opencl][gemm][conv2d]") {
  if (!first_opencl_device()) {
    WARN("SKIPPED: no OpenCL device");
    return;
  }
  Conv2dShape strided;  // edge tiles, rectangular stride and padding, one GEMM for dW
  strided.batch = 3; strided.in_channels = 2; strided.height = 9; strided.width = 11;
  strided.out_channels = 5; strided.kernel_h = 3; strided.kernel_w = 4;
  strided.stride_h = 2; strided.stride_w = 1; strided.pad_h = 1; strided.pad_w = 2;
  Conv2dShape split;  // L = 7 * 23 * 23 = 3703: dW in 14 slices of 264 plus a 7-column tail
  split.batch = 7; split.in_channels = 1; split.height = 27; split.width = 27;
  split.out_channels = 10; split.kernel_h = 5; split.kernel_w = 5;
  // Stride 1, padding under the kernel's size: dx as a convolution of dy (flipped weights),
  // a rectangular kernel and unequal padding (dy padded by 2 and 1).
  Conv2dShape same;
  same.batch = 3; same.in_channels = 6; same.height = 9; same.width = 13;
  same.out_channels = 5; same.kernel_h = 3; same.kernel_w = 4;
  same.pad_h = 0; same.pad_w = 2;
  for (const Conv2dShape& shape : {strided, split, same}) {
    std::vector<float> clblast;
    {
      ScopedEnv never("TRIDENT_OPENCL_OWN_GEMM", "never");
      clblast = conv_results(*fresh_opencl_devices().front(), shape);
    }
    for (const char* tile : {"32", "64", "128", "32x128"}) {
      ScopedEnv always("TRIDENT_OPENCL_OWN_GEMM", "always"),
          forced("TRIDENT_OPENCL_GEMM_TILE", tile);
      INFO("tile " << tile << ", batch " << shape.batch);
      TRIDENT_CHECK_CLOSE(conv_results(*fresh_opencl_devices().front(), shape), clblast,
                          testing::dot_tolerance(*first_opencl_device(), 3703));
    }
  }
}

// Channel sums and batch norm cut a channel's values into pieces when the channels are too few to
// fill the device (a work-group per piece, then a finish per channel), and do a channel in one
// work-group otherwise: both paths against the reference, chosen by the shape.
TEST_CASE("opencl: per-channel reductions in one piece per channel and in many",
          "[opencl][channel_sums][batchnorm]") {
  Device* device = first_opencl_device();
  if (!device) return;
  // Many channels: at least 8 work-groups per compute unit without splitting.
  const int64_t many = 8 * std::max(device->info().compute_units, 1) + 3;
  const struct { int64_t outer, channels, inner; } shapes[] = {
      {4, many, 3}, {2, many, 1}, {1, 1, 300007}, {9000, 2, 1}, {600, 3, 50}};
  for (const auto& s : shapes) {
    INFO("[" << s.outer << ", " << s.channels << ", " << s.inner << "]");
    const size_t n = size_t(s.outer * s.channels * s.inner), c = size_t(s.channels);
    // A large common offset: sums of squares and variances must not cancel.
    const std::vector<float> x = testing::random_floats(n, 5, 90.0f, 110.0f);
    const std::vector<float> dy = testing::random_floats(n, 6);
    std::vector<float> sums(c, 0.5f), want_sums = sums;
    reference::channel_sums(x.data(), x.data(), want_sums.data(), s.outer, s.channels, s.inner,
                            0.5f);
    const Tensor tx = Tensor::from_host(*device, {int64_t(n)}, x);
    const Tensor tsums = Tensor::from_host(*device, {int64_t(c)}, sums);
    device->channel_sums(tx, tx, tsums, s.outer, s.channels, s.inner, 0.5f);
    TRIDENT_CHECK_CLOSE(tsums.to_host(), want_sums, (testing::Tolerance{0.0, 1e-6}));

    BatchNormShape bn;
    bn.outer = s.outer; bn.channels = s.channels; bn.inner = s.inner;
    const std::vector<float> gamma = testing::random_floats(c, 7, 0.5f, 1.5f);
    const std::vector<float> beta = testing::random_floats(c, 8);
    std::vector<float> running_mean(c, 0.0f), running_var(c, 1.0f), y(n), mean(c), invstd(c);
    std::vector<float> dx(n), dgamma(c), dbeta(c);
    reference::batchnorm_forward(bn, true, x.data(), gamma.data(), beta.data(),
                                 running_mean.data(), running_var.data(), y.data(), mean.data(),
                                 invstd.data());
    const Tensor tgamma = Tensor::from_host(*device, {int64_t(c)}, gamma);
    const Tensor tbeta = Tensor::from_host(*device, {int64_t(c)}, beta);
    const Tensor trm = Tensor::zeros(*device, {int64_t(c)});
    const Tensor trv = Tensor::from_host(*device, {int64_t(c)}, std::vector<float>(c, 1.0f));
    const Tensor ty = Tensor::empty(*device, {int64_t(n)});
    const Tensor tmean = Tensor::empty(*device, {int64_t(c)});
    const Tensor tinvstd = Tensor::empty(*device, {int64_t(c)});
    device->batchnorm_forward(bn, true, tx, tgamma, tbeta, trm, trv, ty, tmean, tinvstd);
    // y = (x - mean) * invstd: x - mean loses up to |x| u (u = 2^-24, |x| <= 110) however the
    // mean is summed, and invstd multiplies that (large when a channel's few values lie close).
    const double invstd_max = *std::max_element(invstd.begin(), invstd.end());
    TRIDENT_CHECK_CLOSE(ty.to_host(), y,
                        (testing::Tolerance{std::max(2e-5, 4.0 * 110.0 * 0x1p-24 * invstd_max), 1e-5}));
    TRIDENT_CHECK_CLOSE(tmean.to_host(), mean, (testing::Tolerance{0.0, 1e-6}));
    TRIDENT_CHECK_CLOSE(tinvstd.to_host(), invstd, (testing::Tolerance{0.0, 1e-5}));
    TRIDENT_CHECK_CLOSE(trv.to_host(), running_var, (testing::Tolerance{0.0, 1e-5}));
    const std::vector<float> saved_mean = tmean.to_host(), saved_invstd = tinvstd.to_host();
    reference::batchnorm_backward(bn, x.data(), dy.data(), gamma.data(), saved_mean.data(),
                                  saved_invstd.data(), dx.data(), dgamma.data(), dbeta.data());
    const Tensor tdy = Tensor::from_host(*device, {int64_t(n)}, dy);
    const Tensor tdgamma = Tensor::empty(*device, {int64_t(c)});
    const Tensor tdbeta = Tensor::empty(*device, {int64_t(c)});
    device->batchnorm_backward(bn, tx, tdy, tgamma, tmean, tinvstd, tdy, tdgamma, tdbeta);
    TRIDENT_CHECK_CLOSE(tdy.to_host(), dx, (testing::Tolerance{2e-5, 1e-4}));
    TRIDENT_CHECK_CLOSE(tdgamma.to_host(), dgamma, (testing::Tolerance{1e-4, 1e-5}));
    TRIDENT_CHECK_CLOSE(tdbeta.to_host(), dbeta, (testing::Tolerance{1e-4, 1e-5}));
  }
}

// Adam's bias corrections 1 - beta^t were computed as 1.0f - pown(beta, t) (issue 9): at
// beta2 = 0.999 and t = 2 or 3 even a correctly rounded beta^t leaves 1 - beta^t off by ~7e-6,
// 3.4e-6 on the update; -expm1(t * log1p(beta - 1)) keeps it near 1e-8. One step from zero
// moments, where the corrections set the update's size, checked at 1.5e-6 relative.
TEST_CASE("opencl: Adam's bias correction does not cancel in float", "[opencl][adam]") {
  Device* device = first_opencl_device();
  if (!device) return;
  const int64_t n = 4096;
  const std::vector<float> grads = testing::random_floats(size_t(n), 41);
  const std::vector<float> p_old = testing::random_floats(size_t(n), 42, -2e-3f, 2e-3f);
  AdamParams hp;
  hp.lr = 1e-3f;
  for (uint32_t steps_done : {1u, 2u, 4u, 7u}) {
    INFO("t = " << steps_done + 1);
    std::vector<float> params = p_old, m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    const uint32_t state[2] = {0, steps_done};
    reference::adam_update(params.data(), grads.data(), m.data(), v.data(), n, hp, state);
    const Tensor tp = Tensor::from_host(*device, {n}, p_old);
    const Tensor tg = Tensor::from_host(*device, {n}, grads);
    const Tensor tm = Tensor::zeros(*device, {n}), tv = Tensor::zeros(*device, {n});
    const Tensor tstate =
        Tensor::from_host(*device, {2}, std::vector<int32_t>{0, int32_t(steps_done)});
    device->adam_update(tp, tg, tm, tv, hp, UpdateControl{}, tstate);
    const std::vector<float> got = tp.to_host();
    std::vector<float> got_update(static_cast<size_t>(n)), want_update(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      got_update[i] = float(double(got[i]) - double(p_old[i]));
      want_update[i] = float(double(params[i]) - double(p_old[i]));
    }
    // 2.4e-10: the rounding of p_new (|p| < 3e-3) against updates of about 1e-3.
    TRIDENT_CHECK_CLOSE(got_update, want_update, (testing::Tolerance{2.4e-10, 1.5e-6}));
  }
}

TEST_CASE("opencl: a step that reads back is not captured, and nothing of it runs",
          "[opencl][capture]") {
  Device* device = first_opencl_device();
  if (!device) {
    WARN("SKIPPED: no OpenCL device");
    return;
  }
  const std::vector<float> zeros(4, 0.0f);
  testing::OffsetBuffer buffer(*device, zeros, 1);
  float host[4] = {};
  std::unique_ptr<CapturedWork> work = device->capture([&] {
    device->fill(buffer.tensor(), 1.0f);
    device->copy_to_host(host, buffer.memory(), sizeof host);
  });
  CHECK(work == nullptr);
  CHECK(buffer.values() == zeros);  // the recorded fill was dropped, not run
  work = device->capture([&] { device->fill(buffer.tensor(), 2.0f); });
  REQUIRE(work != nullptr);
  CHECK(buffer.values() == zeros);  // capture records, replay runs
  work->replay();
  CHECK(buffer.values() == std::vector<float>(4, 2.0f));
}

TEST_CASE("opencl: a captured split-K GEMM still replays right after a larger one grew the scratch",
          "[opencl][capture][gemm]") {
  if (!first_opencl_device()) {
    WARN("SKIPPED: no OpenCL device");
    return;
  }
  ScopedEnv own("TRIDENT_OPENCL_OWN_GEMM", "always"), slices("TRIDENT_OPENCL_SPLIT_K", "2");
  const std::vector<std::unique_ptr<Device>> devices = fresh_opencl_devices();
  Device* device = devices.front().get();
  // C[m, n] = A[m, k] B[k, n] with A all ones and B[p, j] = j: C[i, j] = k * j.
  auto run_gemm = [&](int64_t m, int64_t n, int64_t k, const Tensor& a, const Tensor& b,
                      const Tensor& c) {
    GemmArgs g;
    g.m = m, g.n = n, g.k = k;
    g.a = a, g.b = b, g.c = c;
    device->gemm(g);
  };
  auto operands = [&](int64_t m, int64_t n, int64_t k) {
    std::vector<float> b(size_t(k * n));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) b[size_t(p * n + j)] = float(j);
    return std::array<Tensor, 3>{
        Tensor::from_host(*device, {m * k}, std::vector<float>(size_t(m * k), 1.0f)),
        Tensor::from_host(*device, {k * n}, b), Tensor::zeros(*device, {m * n})};
  };
  auto expected = [](int64_t m, int64_t n, int64_t k) {
    std::vector<float> c(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[size_t(i * n + j)] = float(k * j);
    return c;
  };
  auto small = operands(8, 8, 16);
  run_gemm(8, 8, 16, small[0], small[1], small[2]);  // sizes the scratch for this product
  std::unique_ptr<CapturedWork> work =
      device->capture([&] { run_gemm(8, 8, 16, small[0], small[1], small[2]); });
  REQUIRE(work != nullptr);
  auto large = operands(64, 64, 32);
  run_gemm(64, 64, 32, large[0], large[1], large[2]);  // needs a larger scratch
  CHECK(large[2].to_host() == expected(64, 64, 32));
  device->fill(small[2], -1.0f);
  work->replay();
  CHECK(small[2].to_host() == expected(8, 8, 16));
}
#endif
