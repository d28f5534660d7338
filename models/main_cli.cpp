// The `trident` executable: forwards to run_cli.
#include <iostream>

#include "trident/core/registry.h"
#include "trident/models/cli.h"

int main(int argc, char** argv) {
  const int status =
      trident::run_cli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
  trident::DeviceRegistry::release_global();  // every device allocation returned before exit
  return status;
}
