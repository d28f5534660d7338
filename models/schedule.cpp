// Learning-rate schedule tables (see models/schedule.h), with PyTorch's formulas.
#include "trident/models/schedule.h"

#include <cmath>

#include "trident/core/error.h"

namespace trident {
namespace {

constexpr double kPi = 3.14159265358979323846;

// torch.optim.lr_scheduler._annealing_cos.
double anneal_cos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

}  // namespace

void validate(const ScheduleConfig& c) {
  if (c.kind != "none" && c.kind != "step" && c.kind != "cosine" && c.kind != "onecycle")
    throw UsageError("unknown schedule '" + c.kind + "' (use none, step, cosine or onecycle)");
  if (c.warmup_steps < 0) throw UsageError("warm-up steps must be >= 0");
  if (c.kind == "step" && (c.step_epochs < 1 || !(c.gamma > 0.0f) || !std::isfinite(c.gamma)))
    throw UsageError("the step schedule needs step epochs >= 1 and a finite gamma > 0");
  if (c.kind == "cosine" && (!(c.min_lr >= 0.0f) || !std::isfinite(c.min_lr)))
    throw UsageError("the cosine schedule's min lr must be finite and >= 0");
  if (c.kind == "onecycle") {
    if (!(c.max_lr > 0.0f) || !std::isfinite(c.max_lr))
      throw UsageError("the onecycle schedule needs a finite max lr > 0 (--max-lr)");
    if (!(c.pct_start > 0.0f && c.pct_start < 1.0f))
      throw UsageError("onecycle pct_start must be in (0, 1)");
    if (!(c.div_factor > 0.0f) || !(c.final_div_factor > 0.0f))
      throw UsageError("onecycle div factors must be > 0");
  }
}

std::vector<float> schedule_table(const ScheduleConfig& c, double base_lr, double base_momentum,
                                  int64_t total_steps, int64_t steps_per_epoch) {
  validate(c);
  if (c.kind == "none" || total_steps <= 0) return {};
  std::vector<float> table(static_cast<size_t>(2 * total_steps));
  for (int64_t t = 0; t < total_steps; ++t) {
    double lr = base_lr, momentum = base_momentum;
    if (c.kind == "step") {
      const int64_t epoch = steps_per_epoch > 0 ? t / steps_per_epoch : 0;
      lr = base_lr * std::pow(double(c.gamma), double(epoch / c.step_epochs));
    } else if (c.kind == "cosine") {
      lr = double(c.min_lr) + (base_lr - double(c.min_lr)) *
                                  (1.0 + std::cos(kPi * double(t) / double(total_steps))) / 2.0;
    } else {  // onecycle, torch.optim.lr_scheduler.OneCycleLR.get_lr with step_num = t
      const double max_lr = c.max_lr, initial_lr = max_lr / c.div_factor;
      const double min_lr = initial_lr / c.final_div_factor;
      const double phase1_end = double(c.pct_start) * double(total_steps) - 1.0;
      const double phase2_end = double(total_steps) - 1.0;
      const double step = double(t);
      if (step <= phase1_end) {
        const double pct = step / phase1_end;
        lr = anneal_cos(initial_lr, max_lr, pct);
        if (c.cycle_momentum) momentum = anneal_cos(c.max_momentum, c.base_momentum, pct);
      } else {
        const double pct = (step - phase1_end) / (phase2_end - phase1_end);
        lr = anneal_cos(max_lr, min_lr, pct);
        if (c.cycle_momentum) momentum = anneal_cos(c.base_momentum, c.max_momentum, pct);
      }
    }
    if (c.kind != "onecycle" && c.warmup_steps > 0 && t < c.warmup_steps)
      lr *= double(t + 1) / double(c.warmup_steps);
    table[size_t(2 * t)] = static_cast<float>(lr);
    table[size_t(2 * t + 1)] = static_cast<float>(momentum);
  }
  return table;
}

}  // namespace trident
