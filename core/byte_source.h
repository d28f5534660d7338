// Sequential readers over part of an open file, either as stored or inflated (gzip or the raw
// deflate of zip entries), that never allocate more than the bytes actually produced.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class ByteSource {
 public:
  enum class Encoding { stored, gzip, deflate };
  static constexpr uint64_t kToEndOfFile = ~uint64_t{0};

  // Reads `length` bytes (or to the end of the file) of `file` from its current position, decoded
  // by `encoding`. gzip: one or more concatenated members, nothing after them; deflate: one raw
  // stream (zip method 8). `name` prefixes every error (the file, or "file: entry").
  ByteSource(std::FILE* file, std::string name, Encoding encoding, uint64_t length = kToEndOfFile);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Up to n bytes; fewer only at the true end of the data. A read error, corrupt or truncated
  // compressed data is a FormatError naming the source.
  size_t read(uint8_t* dst, size_t n);
  // Appends up to n bytes to out, growing it geometrically (at most about twice the bytes that
  // really arrive), so a header that declares far more than the data holds costs no memory.
  // Returns how many bytes arrived.
  uint64_t read_into(std::vector<uint8_t>& out, uint64_t n);
  // Consumes the rest and returns true if there was any (for "trailing bytes" checks).
  bool has_more();

  const std::string& name() const { return name_; }
  Encoding encoding() const { return encoding_; }
  uint64_t produced() const { return produced_; }  // bytes returned so far
  uint32_t crc32() const { return crc_; }           // CRC-32 of those bytes

 private:
  size_t read_stored(uint8_t* dst, size_t n);
  bool refill();
  size_t inflate_into(uint8_t* dst, size_t n);

  std::FILE* file_;
  std::string name_;
  Encoding encoding_;
  uint64_t remaining_;  // input bytes of the file still to consume
  z_stream z_{};
  bool z_open_ = false;
  bool stream_end_ = false;
  uint64_t produced_ = 0;
  uint32_t crc_ = 0;
  std::unique_ptr<unsigned char[]> in_;
};

// True if the next two bytes of file are the gzip magic 1f 8b; the position is unchanged.
bool starts_with_gzip_magic(std::FILE* file);

}  // namespace trident
