// libFuzzer target: the CLI's option parser, the per-command option check and the train/eval
// settings checks. The input is the argument list, arguments separated by NUL bytes. Accepted
// settings must be in range.
#include <cmath>

#include "trident/core/error.h"
#include "trident/models/cli_options.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) args.emplace_back();
    else args.back() += static_cast<char>(data[i]);
  }
  try {
    const CliArgs a = parse_cli(args);
    FUZZ_CHECK(a.command == args[0]);
    try {  // an option foreign to the command: a UsageError (train_settings is fuzzed anyway)
      reject_foreign_options(a);
    } catch (const UsageError&) {
    }
    const CliTrainSettings s = train_settings(a);
    FUZZ_CHECK(std::isfinite(s.lr) && s.lr >= 0.0f);
    FUZZ_CHECK(std::isfinite(s.momentum) && s.momentum >= 0.0f);
    FUZZ_CHECK(std::isfinite(s.weight_decay) && s.weight_decay >= 0.0f);
    FUZZ_CHECK(s.epochs >= 1 && s.batch >= 1 && s.train_limit >= 0 && s.test_limit >= 0);
    FUZZ_CHECK(s.average_every >= -1);  // -1: --sync average, K measured at start
    FUZZ_CHECK(!s.resume || !s.checkpoint.empty());
    FUZZ_CHECK(!a.values.count("--checkpoint") || !s.checkpoint.empty());
  } catch (const UsageError&) {
  }
  return 0;
}
