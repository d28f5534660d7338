// The `trident` command line: devices, train, eval.
#include <iostream>

#include "core/error.h"
#include "core/registry.h"

int main(int argc, char** argv) {
  try {
    std::cout << trident::DeviceRegistry::global().describe();
    return 0;
  } catch (const trident::Error& e) {
    std::cerr << "trident: " << e.what() << "\n";
    return 1;
  }
}
