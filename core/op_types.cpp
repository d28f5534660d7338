// Names and properties of the op argument enums (core/op_types.h).
#include "trident/core/op_types.h"

namespace trident {

const char* unary_op_name(UnaryOp op) {
  switch (op) {
#define TRIDENT_UNARY_NAME(name, module) \
  case UnaryOp::name: return #name;
    TRIDENT_UNARY_OPS(TRIDENT_UNARY_NAME)
#undef TRIDENT_UNARY_NAME
  }
  return "?";
}

const char* unary_module_name(UnaryOp op) {
  switch (op) {
#define TRIDENT_UNARY_MODULE(name, module) \
  case UnaryOp::name: return #module;
    TRIDENT_UNARY_OPS(TRIDENT_UNARY_MODULE)
#undef TRIDENT_UNARY_MODULE
  }
  return "?";
}

bool unary_backward_needs_input(UnaryOp op, float alpha) {
  return op == UnaryOp::gelu || op == UnaryOp::silu || (op == UnaryOp::leaky_relu && alpha < 0.0f);
}

}  // namespace trident
