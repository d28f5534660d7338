// The Catch2 entry point of trident_tests: runs the session, then frees the global registry's
// devices, so that compute-sanitizer's leak check (scripts/gpu_verify.sh sanitize) sees every
// device allocation returned.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "trident/core/registry.h"

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  trident::DeviceRegistry::release_global();
  return failed;
}
