// The `trident` executable: forwards to run_cli.
#include <iostream>

#include "trident/models/cli.h"

int main(int argc, char** argv) {
  return trident::run_cli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
