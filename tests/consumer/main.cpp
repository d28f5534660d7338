// A user program built against the installed Trident package: lists the devices.
#include <trident/trident.h>

#include <iostream>

int main() {
  auto& registry = trident::DeviceRegistry::global();
  std::cout << registry.describe();
  return registry.all_devices().empty() ? 1 : 0;
}
