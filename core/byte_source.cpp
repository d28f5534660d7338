// ByteSource: stored or inflated reads over a file region, with errors naming the source.
#include "trident/core/byte_source.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trident/core/error.h"

namespace trident {
namespace {

constexpr size_t kChunk = 1 << 16;

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw FormatError(name + ": " + problem);
}

}  // namespace

bool starts_with_gzip_magic(std::FILE* file) {
  const long at = std::ftell(file);
  const int b0 = std::fgetc(file), b1 = std::fgetc(file);
  std::clearerr(file);
  std::fseek(file, at, SEEK_SET);
  return b0 == 0x1f && b1 == 0x8b;
}

ByteSource::ByteSource(std::FILE* file, std::string name, Encoding encoding, uint64_t length)
    : file_(file), name_(std::move(name)), encoding_(encoding), remaining_(length) {
  if (encoding_ == Encoding::stored) return;
  in_.reset(new unsigned char[kChunk]);
  // windowBits 15 + 16: a gzip wrapper; -15: raw deflate, as zip stores it.
  if (inflateInit2(&z_, encoding_ == Encoding::gzip ? 15 + 16 : -15) != Z_OK)
    fail(name_, "zlib inflateInit2 failed");
  z_open_ = true;
}

ByteSource::~ByteSource() {
  if (z_open_) inflateEnd(&z_);
}

size_t ByteSource::read(uint8_t* dst, size_t n) {
  const size_t got = encoding_ == Encoding::stored ? read_stored(dst, n) : inflate_into(dst, n);
  produced_ += got;
  for (size_t done = 0; done < got;) {  // zlib's crc32 takes at most 4 GiB - 1 per call
    const uInt part = static_cast<uInt>(std::min<size_t>(got - done, 1u << 30));
    crc_ = static_cast<uint32_t>(::crc32(crc_, dst + done, part));
    done += part;
  }
  return got;
}

uint64_t ByteSource::read_into(std::vector<uint8_t>& out, uint64_t n) {
  constexpr uint64_t kFirst = uint64_t{1} << 16;
  const size_t base = out.size();
  uint64_t have = 0;
  while (have < n) {
    // Grow to twice what has arrived (at least 64 KiB), never past what was asked for.
    const uint64_t target = std::min(n, std::max(kFirst, 2 * have));
    out.resize(base + static_cast<size_t>(target));
    const uint64_t want = target - have;
    const size_t got = read(out.data() + base + have, static_cast<size_t>(want));
    have += got;
    if (got < want) break;
  }
  out.resize(base + static_cast<size_t>(have));
  return have;
}

bool ByteSource::has_more() {
  uint8_t byte;
  return read(&byte, 1) != 0;
}

size_t ByteSource::read_stored(uint8_t* dst, size_t n) {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
  const size_t got = want == 0 ? 0 : std::fread(dst, 1, want, file_);
  if (got < want && std::ferror(file_)) fail(name_, std::string("read error: ") + std::strerror(errno));
  if (remaining_ != kToEndOfFile) remaining_ -= got;
  return got;
}

bool ByteSource::refill() {
  const size_t got = read_stored(in_.get(), kChunk);
  z_.next_in = in_.get();
  z_.avail_in = static_cast<uInt>(got);
  return got > 0;
}

size_t ByteSource::inflate_into(uint8_t* dst, size_t n) {
  const char* what = encoding_ == Encoding::gzip ? "gzip" : "deflate";
  size_t done = 0;
  while (done < n) {
    if (stream_end_ && encoding_ == Encoding::deflate) return done;  // one stream per zip entry
    if (z_.avail_in == 0 && !refill()) {
      if (stream_end_) return done;  // clean end after a complete gzip member
      fail(name_, std::string(what) + " stream is truncated (the data ends inside the compressed stream, after " +
                      std::to_string(produced_ + done) + " decompressed bytes)");
    }
    if (stream_end_) {
      // More bytes after a complete gzip member: another member (gzip allows concatenation), or junk.
      if (z_.next_in[0] != 0x1f) fail(name_, "trailing bytes after the end of the gzip stream");
      inflateReset(&z_);
      stream_end_ = false;
    }
    const size_t want = std::min<size_t>(n - done, 1u << 30);
    z_.next_out = dst + done;
    z_.avail_out = static_cast<uInt>(want);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    done += want - z_.avail_out;
    if (rc == Z_STREAM_END) {
      stream_end_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(name_, std::string("corrupt ") + what + " data (zlib: " + (z_.msg != nullptr ? z_.msg : zError(rc)) +
                      ") after " + std::to_string(produced_ + done) + " decompressed bytes");
    }
  }
  return done;
}

}  // namespace trident
