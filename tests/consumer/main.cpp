// A user program built against the installed Trident package: prints the version, lists the devices.
#include <trident/trident.h>
#include <trident/version.h>

#include <iostream>

int main() {
  std::cout << "Trident " << TRIDENT_VERSION_STRING << " (" << TRIDENT_BUILD_FEATURES << ")\n";
  auto& registry = trident::DeviceRegistry::global();
  std::cout << registry.describe();
  return registry.all_devices().empty() ? 1 : 0;
}
