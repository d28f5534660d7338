// Image files as model inputs: PGM (P2 text, P5 binary, 8 or 16 bits) and PNG (through libpng,
// any bit depth, palette or not) read into 8-bit planes, channel conversion (RGB -> gray by
// ITU-R BT.601 luma, gray -> RGB by repetition) and bilinear resizing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// 8-bit pixels, channels first: pixels[(c * height + y) * width + x]; channels 1 (gray) or 3.
struct Image {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;
};

// What kind of file `path` holds, from its first bytes: "png", "pgm", "npy", or "" if none of
// them (FormatError naming the path if it cannot be opened as a regular file).
std::string sniff_input_kind(const std::string& path);

// Reads a PGM or PNG file. PGM: maxval up to 65535, scaled to 0..255 (rounded); comments
// allowed. PNG: palette expanded, 16 bits reduced to 8 (rounded), alpha dropped, 1- and 2-bit
// gray widened. FormatError naming the file and the problem for anything malformed, truncated
// or larger than 2^26 pixels; never a crash. PNG needs a build with libpng (else FormatError).
Image load_image(const std::string& path);

// The image with `channels` channels (1 or 3): RGB -> gray as
// round(0.299 R + 0.587 G + 0.114 B), gray -> RGB by copying the plane.
Image convert_channels(const Image& image, int64_t channels);

// Bilinear resize with half-pixel centres (PyTorch's interpolate(mode="bilinear",
// align_corners=False) without antialiasing, OpenCV's INTER_LINEAR), rounded to 8 bits.
Image resize_bilinear(const Image& image, int64_t height, int64_t width);

// True when this build reads PNG files (libpng was found).
bool png_supported();

}  // namespace trident
