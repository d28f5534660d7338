// Learning-rate schedules as a host table of (lr, momentum) per optimizer step, computed in
// double exactly as PyTorch's schedulers compute them and read by the optimizer update on the
// device (so that a captured step replays with the right value every step).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

struct ScheduleConfig {
  // none: constant; step: lr * gamma^(epoch / step_epochs) (StepLR); cosine: from lr down to
  // min_lr over the run, per step (CosineAnnealingLR with T_max = all steps); onecycle:
  // PyTorch's OneCycleLR (cosine annealing, three_phase=False).
  std::string kind = "none";
  int64_t warmup_steps = 0;     // step / cosine: linear warm-up from lr / warmup_steps
  int64_t step_epochs = 1;      // step
  float gamma = 0.1f;           // step
  float min_lr = 0.0f;          // cosine
  float max_lr = 0.0f;          // onecycle (required)
  float pct_start = 0.3f, div_factor = 25.0f, final_div_factor = 1e4f;  // onecycle
  bool cycle_momentum = true;   // onecycle: momentum (SGD) / beta1 (Adam) from max to base and back
  float base_momentum = 0.85f, max_momentum = 0.95f;
};

// Checks the configuration; UsageError naming the setting on a bad value or unknown kind.
void validate(const ScheduleConfig& config);

// The table [total_steps, 2]: row t = (lr, momentum) for optimizer step t (0-based), from the
// optimizer's base lr and momentum (or beta1). Empty for kind "none".
std::vector<float> schedule_table(const ScheduleConfig& config, double base_lr,
                                  double base_momentum, int64_t total_steps,
                                  int64_t steps_per_epoch);

}  // namespace trident
