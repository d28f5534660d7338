// libFuzzer target: the .npz loader (zip directory, stored and deflated entries, the four arrays
// and their cross-checks), whole and with limits (mode byte: train limit, test limit).
#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = fuzz::scratch_path("data.npz");
  fuzz::write_file(path, data + 1, size - 1);
  DatasetLoadOptions options;
  options.train_limit = data[0] & 15;
  options.test_limit = data[0] >> 4;
  try {
    const DatasetSplits s = load_npz(path, options);
    FUZZ_CHECK(s.train.sample_shape() == s.test.sample_shape());
    FUZZ_CHECK(s.train.classes() == s.test.classes());
    FUZZ_CHECK(options.train_limit == 0 || s.train.size() <= options.train_limit);
    for (int32_t label : s.train.labels()) FUZZ_CHECK(label >= 0 && label < s.train.classes());
  } catch (const Error&) {
  }
  return 0;
}
