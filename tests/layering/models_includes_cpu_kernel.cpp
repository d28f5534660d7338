// Layering probe: models including a backend's private kernel header must not build.
#include "trident/kernels/cpu/gemm.h"
