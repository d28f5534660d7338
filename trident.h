// Trident's umbrella header: the device interface, tensors, the registry, data sets, the layers,
// networks, optimizers, schedules, the built-in models, the Trainer and the Predictor.
#pragma once
#include "core/dataset.h"
#include "core/device.h"
#include "core/error.h"
#include "core/idx.h"  // default_data_directory()
#include "core/registry.h"
#include "core/tensor.h"
#include "models/layers.h"
#include "models/network.h"
#include "models/optimizer.h"
#include "models/predictor.h"
#include "models/schedule.h"
#include "models/sequential.h"
#include "models/state_dict.h"
#include "models/trainer.h"
#include "models/zoo.h"
