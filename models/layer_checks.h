// Checks and defaults the layer bodies share (models/layers.cpp,
// models/layers_parameter_free.cpp): errors that name the layer, argument checks, and the
// default initialisation bound. Internal to the models layer.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "trident/core/error.h"
#include "trident/models/layer.h"

namespace trident::layer_checks {

[[noreturn]] inline void fail(const Layer& layer, const std::string& problem) {
  throw ShapeError(layer.kind() + " '" + layer.name() + "': " + problem);
}

inline void expect_rank(const Layer& layer, const Shape& input, size_t rank, const char* what) {
  if (input.size() != rank)
    fail(layer, std::string("expects ") + what + ", got " + shape_string(input));
}

inline void require_positive(const char* layer, const char* what, int64_t value) {
  if (value < 1)
    throw ShapeError(std::string(layer) + ": " + what + " must be at least 1, got " +
                     std::to_string(value));
}

// PyTorch's default bound for a layer's weights and bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
inline float fan_in_bound(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

}  // namespace trident::layer_checks
