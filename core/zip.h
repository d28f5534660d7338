// A minimal reader of zip archives (what NumPy's .npz is): the central directory, ZIP64 sizes,
// and entries stored or deflated, each read as a ByteSource that inflates only what is asked.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/byte_source.h"
#include "trident/core/files.h"

namespace trident {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflate
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0, size = 0, local_header_offset = 0;
};

class ZipReader {
 public:
  // Opens path (a regular file only) and reads its central directory. Throws FormatError naming
  // the file on: no end-of-central-directory record, a directory past the end of the file or
  // larger than 64 MiB, multi-disk archives, malformed records and duplicate entry names.
  explicit ZipReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr if absent

  // A reader over one entry's data, positioned at its start. Throws FormatError for encrypted
  // entries, methods other than stored and deflate, a stored entry whose sizes differ, and data
  // past the end of the file. Only one entry is open at a time (they share the file position).
  std::unique_ptr<ByteSource> open(const ZipEntry& entry);
  // For an entry read to its end: its decompressed size and CRC-32 must match the directory's.
  void check_complete(const ZipEntry& entry, const ByteSource& source) const;

 private:
  std::string path_;
  InputFile file_;
  std::vector<ZipEntry> entries_;
};

}  // namespace trident
