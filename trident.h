// Trident's umbrella header: the device interface, tensors, the registry, the models and training.
#pragma once
#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"
