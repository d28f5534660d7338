// Progress bar and JSON lines for the CLI.
#include "trident/models/progress.h"

#include <cstdio>

#include "trident/core/json.h"

namespace trident {

ProgressPrinter::ProgressPrinter(bool live) : live_(live) {}

void ProgressPrinter::update(int64_t epoch, int64_t epochs, const Progress& p, int64_t batch) {
  if (!live_ || p.steps == 0) return;
  constexpr int kWidth = 30;
  const double fraction = static_cast<double>(p.step) / static_cast<double>(p.steps);
  const int filled = static_cast<int>(fraction * kWidth);
  const double rate = p.seconds > 0 ? static_cast<double>(p.step * batch) / p.seconds : 0.0;
  const double eta = fraction > 0 ? p.seconds * (1.0 - fraction) / fraction : 0.0;
  std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %3.0f%%  %8.0f samples/s  loss %.4f  ETA %4.0fs ",
               static_cast<long long>(epoch), static_cast<long long>(epochs),
               std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), 100.0 * fraction,
               rate, p.loss, eta);
  std::fflush(stderr);
}

void ProgressPrinter::finish_epoch(int64_t epoch, int64_t epochs, const EpochStats& s,
                                   const EvalStats& e, const std::string& device) {
  if (live_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr,
               "epoch %lld/%lld  train loss %.4f  test loss %.4f  test accuracy %.2f%%  "
               "%.0f samples/s  %.2fs  [%s]\n",
               static_cast<long long>(epoch), static_cast<long long>(epochs), s.train_loss,
               e.loss, 100.0 * e.accuracy, s.samples_per_s, s.seconds, device.c_str());
  std::fflush(stderr);
}

std::string epoch_json(const EpochStats& s, const EvalStats& e, const std::string& device,
                       const std::string& model) {
  // Through the one JSON writer: a NaN or infinite loss is written as null, never as "nan".
  return json::ObjectWriter()
      .integer("epoch", s.epoch)
      .string("model", model)
      .number("train_loss", s.train_loss)
      .number("test_loss", e.loss)
      .number("test_accuracy", e.accuracy)
      .number("samples_per_s", s.samples_per_s)
      .number("seconds", s.seconds)
      .integer("steps", s.steps)
      .string("device", device)
      .str();
}

}  // namespace trident
