// Precision names, and the run's precision from an option or TRIDENT_PRECISION.
#include "trident/models/precision.h"

#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident {

Precision parse_precision(const std::string& name) {
  if (name == "fp32" || name == "float32") return Precision::fp32;
  if (name == "tf32") return Precision::tf32;
  if (name == "bf16" || name == "bfloat16") return Precision::bf16;
  if (name == "fp16" || name == "float16" || name == "half") return Precision::fp16;
  throw UsageError("unknown precision '" + name + "' (use fp32, tf32, bf16 or fp16)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

Precision resolve_precision(const std::optional<Precision>& chosen) {
  if (chosen) return *chosen;
  const auto name = env_string("TRIDENT_PRECISION");
  if (!name) return Precision::fp32;
  try {
    return parse_precision(*name);
  } catch (const UsageError& e) {
    throw UsageError(std::string("TRIDENT_PRECISION: ") + e.what());
  }
}

}  // namespace trident
