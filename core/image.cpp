// PGM and PNG readers (8-bit planes), channel conversion and bilinear resizing.
#include "trident/core/image.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "trident/core/error.h"
#include "trident/core/files.h"

#ifdef TRIDENT_HAVE_PNG
#include <png.h>
#endif

namespace trident {
namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 26;  // 64 Mi pixels: far beyond any model input

std::vector<uint8_t> read_all(const std::string& path, const char* kind) {
  const InputFile input = open_regular_file(path, kind);
  std::vector<uint8_t> bytes(static_cast<size_t>(input.size()));
  if (!bytes.empty() && std::fread(bytes.data(), 1, bytes.size(), input.get()) != bytes.size())
    throw FormatError(path + ": could not read the " + std::to_string(bytes.size()) + "-byte file");
  return bytes;
}

void check_size(const std::string& path, int64_t width, int64_t height) {
  if (width < 1 || height < 1 || width > kMaxPixels || height > kMaxPixels ||
      width * height > kMaxPixels)
    throw FormatError(path + ": an image of " + std::to_string(width) + "x" +
                      std::to_string(height) + " pixels is empty or too large (at most " +
                      std::to_string(kMaxPixels) + " pixels)");
}

// ---- PGM (Netpbm): "P2"/"P5", whitespace, width, height, maxval (comments from '#' to the end
// of a line anywhere in the header), then the samples: P5 one byte each (two, big-endian, when
// maxval > 255) after a single whitespace byte, P2 decimal text.
class PgmReader {
 public:
  PgmReader(std::vector<uint8_t> bytes, std::string path)
      : bytes_(std::move(bytes)), path_(std::move(path)) {}

  Image read() {
    if (bytes_.size() < 2 || bytes_[0] != 'P' || (bytes_[1] != '2' && bytes_[1] != '5'))
      fail("not a PGM file (it does not start with P2 or P5)");
    const bool binary = bytes_[1] == '5';
    pos_ = 2;
    const int64_t width = number("width"), height = number("height"), maxval = number("maxval");
    if (maxval < 1 || maxval > 65535)
      fail("maxval " + std::to_string(maxval) + " is outside 1..65535");
    check_size(path_, width, height);
    Image image;
    image.channels = 1;
    image.height = height;
    image.width = width;
    const size_t count = static_cast<size_t>(width * height);
    image.pixels.resize(count);
    const auto scaled = [&](int64_t v) {
      if (v > maxval) fail("a sample of " + std::to_string(v) + " exceeds maxval " + std::to_string(maxval));
      return static_cast<uint8_t>((v * 255 + maxval / 2) / maxval);  // rounded to 0..255
    };
    if (binary) {
      if (pos_ >= bytes_.size() || !std::isspace(bytes_[pos_])) fail("no whitespace after maxval");
      ++pos_;
      const size_t item = maxval > 255 ? 2 : 1;
      const size_t need = count * item;
      if (bytes_.size() - pos_ < need)
        fail("the pixel data is truncated (" + std::to_string(bytes_.size() - pos_) +
             " bytes for " + std::to_string(width) + "x" + std::to_string(height) + " pixels of " +
             std::to_string(item) + " byte" + (item == 1 ? "" : "s") + ", " +
             std::to_string(need) + " needed)");
      for (size_t i = 0; i < count; ++i) {
        const uint8_t* p = &bytes_[pos_ + i * item];
        image.pixels[i] = scaled(item == 2 ? (int64_t(p[0]) << 8 | p[1]) : p[0]);
      }
    } else {
      for (size_t i = 0; i < count; ++i) image.pixels[i] = scaled(number("pixel value"));
    }
    return image;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw FormatError(path_ + ": " + problem);
  }
  void skip_space_and_comments() {
    while (pos_ < bytes_.size()) {
      if (bytes_[pos_] == '#') {
        while (pos_ < bytes_.size() && bytes_[pos_] != '\n') ++pos_;
      } else if (std::isspace(bytes_[pos_])) {
        ++pos_;
      } else {
        break;
      }
    }
  }
  int64_t number(const char* what) {
    skip_space_and_comments();
    if (pos_ >= bytes_.size()) fail(std::string("the file ends before the ") + what);
    if (!std::isdigit(bytes_[pos_]))
      fail(std::string("expected the ") + what + " (a decimal number) at byte " + std::to_string(pos_));
    int64_t v = 0;
    while (pos_ < bytes_.size() && std::isdigit(bytes_[pos_])) {
      v = v * 10 + (bytes_[pos_++] - '0');
      if (v > kMaxPixels) fail(std::string("the ") + what + " is too large");
    }
    return v;
  }

  std::vector<uint8_t> bytes_;
  std::string path_;
  size_t pos_ = 0;
};

#ifdef TRIDENT_HAVE_PNG
// libpng reports errors through a longjmp out of its calls, back into the function that set the
// jump: png_header() and png_pixels() hold no C++ object with a destructor, and PngReader (in
// their caller) owns libpng's state and frees it however they end.
struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const std::vector<uint8_t>* bytes = nullptr;
  size_t pos = 0;
  char message[256] = {0};
  std::jmp_buf jump;
  ~PngReader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

void png_fail(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  std::longjmp(r->jump, 1);
}

void png_warn(png_structp, png_const_charp) {}  // warnings (e.g. a bad sRGB chunk) are ignored

void png_read_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->bytes->size() - r->pos < length) png_error(png, "the file is truncated");
  std::memcpy(out, r->bytes->data() + r->pos, length);
  r->pos += length;
}

// Reads the header and asks for 8-bit gray or RGB without alpha; false on a libpng error.
bool png_header(PngReader& r, png_uint_32* width, png_uint_32* height, int* channels) {
  if (setjmp(r.jump)) return false;
  png_set_read_fn(r.png, &r, png_read_memory);
  png_set_user_limits(r.png, static_cast<png_uint_32>(kMaxPixels),
                      static_cast<png_uint_32>(kMaxPixels));
  png_read_info(r.png, r.info);
  *width = png_get_image_width(r.png, r.info);
  *height = png_get_image_height(r.png, r.info);
  if (uint64_t(*width) * uint64_t(*height) > uint64_t(kMaxPixels))
    png_error(r.png, "more than 2^26 pixels");
  const int color = png_get_color_type(r.png, r.info);
  const int depth = png_get_bit_depth(r.png, r.info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(r.png);
  if (depth == 16) png_set_scale_16(r.png);  // rounded, as PGM's 16-bit samples are
  png_set_strip_alpha(r.png);  // an alpha channel, or one a palette's tRNS chunk would add
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  *channels = png_get_channels(r.png, r.info);
  if (*channels != 1 && *channels != 3) png_error(r.png, "unexpected channel count after conversion");
  if (png_get_rowbytes(r.png, r.info) != size_t(*width) * size_t(*channels))
    png_error(r.png, "unexpected row size after conversion");
  return true;
}

bool png_pixels(PngReader& r, png_bytep* rows) {
  if (setjmp(r.jump)) return false;
  png_read_image(r.png, rows);
  png_read_end(r.png, nullptr);
  return true;
}
#endif

Image load_png(const std::string& path) {
#ifdef TRIDENT_HAVE_PNG
  const std::vector<uint8_t> bytes = read_all(path, "PNG file");
  PngReader r;
  r.bytes = &bytes;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_fail, png_warn);
  if (r.png) r.info = png_create_info_struct(r.png);
  if (!r.png || !r.info) throw Error(path + ": libpng could not start (out of memory?)");
  png_uint_32 width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> interleaved;
  std::vector<png_bytep> rows;
  bool ok = png_header(r, &width, &height, &channels);
  if (ok) {
    interleaved.resize(size_t(width) * height * channels);
    for (png_uint_32 y = 0; y < height; ++y)
      rows.push_back(interleaved.data() + size_t(y) * width * channels);
    ok = png_pixels(r, rows.data());
  }
  if (!ok)
    throw FormatError(path + ": not a readable PNG image: " +
                      (r.message[0] ? r.message : "malformed PNG data"));
  check_size(path, width, height);
  Image image;
  image.channels = channels;
  image.height = height;
  image.width = width;
  image.pixels.resize(interleaved.size());
  const size_t plane = size_t(width) * height;
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < channels; ++c) image.pixels[c * plane + i] = interleaved[i * channels + c];
  return image;
#else
  throw FormatError(path + ": this Trident was built without libpng, so it cannot read PNG "
                    "files (install libpng-dev and rebuild, or convert the image to PGM)");
#endif
}

}  // namespace

bool png_supported() {
#ifdef TRIDENT_HAVE_PNG
  return true;
#else
  return false;
#endif
}

std::string sniff_input_kind(const std::string& path) {
  const InputFile input = open_regular_file(path, "input file");
  uint8_t head[8] = {0};
  const size_t got = std::fread(head, 1, sizeof head, input.get());
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (got == 8 && std::memcmp(head, kPng, 8) == 0) return "png";
  if (got >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return "npy";
  if (got >= 3 && head[0] == 'P' && (head[1] == '2' || head[1] == '5') && std::isspace(head[2]))
    return "pgm";
  return "";
}

Image load_image(const std::string& path) {
  const std::string kind = sniff_input_kind(path);
  if (kind == "png") return load_png(path);
  if (kind == "pgm") return PgmReader(read_all(path, "PGM file"), path).read();
  throw FormatError(path + ": not a PNG or PGM (P2, P5) image");
}

Image convert_channels(const Image& image, int64_t channels) {
  if (channels != 1 && channels != 3)
    throw UsageError("images can be converted to 1 or 3 channels, not " + std::to_string(channels));
  if (image.channels == channels) return image;
  const size_t plane = static_cast<size_t>(image.height * image.width);
  Image out;
  out.channels = channels;
  out.height = image.height;
  out.width = image.width;
  out.pixels.resize(plane * static_cast<size_t>(channels));
  if (channels == 3) {  // gray -> RGB
    for (int c = 0; c < 3; ++c)
      std::copy_n(image.pixels.begin(), plane, out.pixels.begin() + c * plane);
  } else {  // RGB -> gray, ITU-R BT.601 luma
    const uint8_t *r = image.pixels.data(), *g = r + plane, *b = g + plane;
    for (size_t i = 0; i < plane; ++i)
      out.pixels[i] = static_cast<uint8_t>(
          std::lround(std::min(255.0, 0.299 * r[i] + 0.587 * g[i] + 0.114 * b[i])));
  }
  return out;
}

Image resize_bilinear(const Image& image, int64_t height, int64_t width) {
  if (height < 1 || width < 1 || height * width > kMaxPixels)
    throw UsageError("cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
  Image out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  out.pixels.resize(static_cast<size_t>(image.channels * height * width));
  // Source coordinate of output pixel i: (i + 0.5) * in / out - 0.5, clamped at 0.
  auto axis = [](int64_t out_size, int64_t in_size, int64_t i, int64_t* lo, int64_t* hi,
                 double* frac) {
    const double src = std::max(0.0, (double(i) + 0.5) * double(in_size) / double(out_size) - 0.5);
    *lo = std::min<int64_t>(static_cast<int64_t>(src), in_size - 1);
    *hi = std::min<int64_t>(*lo + 1, in_size - 1);
    *frac = src - double(*lo);
  };
  for (int64_t c = 0; c < image.channels; ++c) {
    const uint8_t* in = image.pixels.data() + c * image.height * image.width;
    uint8_t* o = out.pixels.data() + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      int64_t y0, y1;
      double fy;
      axis(height, image.height, y, &y0, &y1, &fy);
      for (int64_t x = 0; x < width; ++x) {
        int64_t x0, x1;
        double fx;
        axis(width, image.width, x, &x0, &x1, &fx);
        const double top = in[y0 * image.width + x0] * (1 - fx) + in[y0 * image.width + x1] * fx;
        const double bottom = in[y1 * image.width + x0] * (1 - fx) + in[y1 * image.width + x1] * fx;
        o[y * width + x] = static_cast<uint8_t>(std::lround(top * (1 - fy) + bottom * fy));
      }
    }
  }
  return out;
}

}  // namespace trident
