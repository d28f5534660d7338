// Layering probe: core including a backend's header must not build (core sees core only).
#include "trident/backends/cpu/cpu_device.h"
