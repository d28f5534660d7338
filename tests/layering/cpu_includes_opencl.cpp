// Layering probe: one backend including another's header must not build.
#include "trident/backends/opencl/opencl_device.h"
