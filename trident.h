// Trident's umbrella header: the device interface, tensors, the registry, the models and training.
#pragma once
#include "core/device.h"
#include "core/error.h"
#include "core/registry.h"
#include "core/tensor.h"
