// libFuzzer target: the image readers (PGM P2/P5 and PNG through libpng), then the channel
// conversions and a bilinear resize of whatever they return.
#include "trident/core/error.h"
#include "trident/core/image.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("image");
  fuzz::write_file(path, data, size);
  try {
    const Image image = load_image(path);
    FUZZ_CHECK(image.channels == 1 || image.channels == 3);
    FUZZ_CHECK(image.height >= 1 && image.width >= 1);
    FUZZ_CHECK(image.pixels.size() == static_cast<size_t>(image.channels * image.height * image.width));
    const Image gray = convert_channels(image, 1), rgb = convert_channels(image, 3);
    FUZZ_CHECK(gray.pixels.size() * 3 == rgb.pixels.size());
    if (image.height * image.width <= 65536) {
      const Image small = resize_bilinear(gray, 7, 5);
      FUZZ_CHECK(small.pixels.size() == 35);
    }
  } catch (const Error&) {
  }
  return 0;
}
