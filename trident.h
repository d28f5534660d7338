// Trident's umbrella header: the device interface, tensors, the registry, data sets, the layers,
// networks, optimizers, schedules, the built-in models, the Trainer and the Predictor.
#pragma once
#include "trident/core/dataset.h"
#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/idx.h"  // default_data_directory()
#include "trident/core/registry.h"
#include "trident/core/tensor.h"
#include "trident/models/layers.h"
#include "trident/models/network.h"
#include "trident/models/optimizer.h"
#include "trident/models/predictor.h"
#include "trident/models/schedule.h"
#include "trident/models/sequential.h"
#include "trident/models/state_dict.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
