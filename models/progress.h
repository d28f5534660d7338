// Progress output of `trident train`: a live bar on a terminal, plain lines otherwise, JSON lines.
#pragma once
#include <string>

#include "trident/models/trainer.h"

namespace trident {

class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool live);  // live: redraw one line on stderr (a terminal)
  void update(int64_t epoch, int64_t epochs, const Progress& p, int64_t batch);
  void finish_epoch(int64_t epoch, int64_t epochs, const EpochStats& s, const EvalStats& e,
                    const std::string& device);

 private:
  bool live_;
};

// One JSON object per epoch, as `--json` prints on stdout.
std::string epoch_json(const EpochStats& s, const EvalStats& e, const std::string& device,
                       const std::string& model);

}  // namespace trident
