// What the build configuration shows to users: `trident --version` (the project version from
// CMake and the compiled-in features) and, for CUDA without NCCL, a note in `trident devices`.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "trident/core/registry.h"
#include "trident/models/cli.h"
#include "trident/version.h"

using namespace trident;

namespace {

struct CliResult {
  int status;
  std::string out, err;
};

CliResult run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = run_cli(args, out, err);
  return {status, out.str(), err.str()};
}

bool has_backend(const std::string& name) {
  for (const auto& backend : DeviceRegistry::global().backends())
    if (backend.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("build: trident --version prints CMake's project version and the build's features",
          "[cli][build]") {
  const CliResult r = run({"--version"});
  CHECK(r.status == 0);
  CHECK(r.err.empty());
  CHECK(std::string(TRIDENT_VERSION_STRING) == TRIDENT_PROJECT_VERSION);  // from project(VERSION)
  CHECK(TRIDENT_VERSION_STRING == std::to_string(TRIDENT_VERSION_MAJOR) + "." +
                                      std::to_string(TRIDENT_VERSION_MINOR) + "." +
                                      std::to_string(TRIDENT_VERSION_PATCH));
  CHECK(r.out.rfind(std::string("trident ") + TRIDENT_PROJECT_VERSION + " (", 0) == 0);
  // Every compiled-in backend is named, and no other.
  const std::string features = TRIDENT_BUILD_FEATURES;
  for (const std::string backend : {"cpu", "cuda", "opencl"}) {
    INFO(backend << " in '" << r.out << "'");
    CHECK((features.find(backend) != std::string::npos) == has_backend(backend));
    CHECK((r.out.find(backend) != std::string::npos) == has_backend(backend));
  }
#ifdef TRIDENT_HAVE_NCCL
  CHECK(r.out.find("nccl") != std::string::npos);
#else
  CHECK(r.out.find("nccl") == std::string::npos);
#endif
}

TEST_CASE("build: trident devices says when the CUDA backend was built without NCCL",
          "[cli][build][cuda]") {
  if (!has_backend("cuda")) {
    WARN("SKIPPED: this build has no CUDA backend");
    return;
  }
  const CliResult r = run({"devices"});
  REQUIRE(r.status == 0);
  const size_t cuda = r.out.find("cuda:");
  REQUIRE(cuda != std::string::npos);
  const std::string section = r.out.substr(cuda, r.out.find("\nopencl:", cuda) - cuda);
  INFO(section);
#ifdef TRIDENT_HAVE_NCCL
  CHECK(section.find("without NCCL") == std::string::npos);
#else
  CHECK(section.find("built without NCCL") != std::string::npos);
#endif
}
