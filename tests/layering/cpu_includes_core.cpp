// Layering probe (control): a backend including core's headers and its own builds.
#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/device.h"
#include "trident/kernels/cpu/gemm.h"
