// Zip central-directory parsing (with ZIP64) and entry readers, every size checked against the file.
#include "trident/core/zip.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "trident/core/error.h"

namespace trident {
namespace {

constexpr uint64_t kMaxDirectoryBytes = uint64_t{64} << 20;
constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50, kLocalHeader = 0x04034b50;

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

}  // namespace

ZipReader::ZipReader(const std::string& path) : path_(path), file_(open_regular_file(path, "zip (.npz) file")) {
  const auto fail = [&](const std::string& what) -> void { throw FormatError(path_ + ": " + what); };
  const auto read_at = [&](uint64_t offset, uint8_t* dst, size_t n, const char* what) {
    if (offset > file_.size() || n > file_.size() - offset ||
        std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0 ||
        std::fread(dst, 1, n, file_.get()) != n)
      fail(std::string("cannot read the ") + what + " at byte " + std::to_string(offset) + " (the file is " +
           std::to_string(file_.size()) + " bytes)");
  };
  const uint64_t size = file_.size();
  if (size < 22) fail("too short for a zip archive (" + std::to_string(size) + " bytes); an .npz is a zip file");
  // The end-of-central-directory record: 22 bytes plus a comment of up to 65535, at the end.
  const uint64_t tail_size = std::min<uint64_t>(size, 22 + 65535);
  std::vector<uint8_t> tail(static_cast<size_t>(tail_size));
  read_at(size - tail_size, tail.data(), tail.size(), "end of the archive");
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail_size) - 22; i >= 0; --i) {
    if (le(&tail[static_cast<size_t>(i)], 4) == kEndOfDirectory &&
        static_cast<uint64_t>(i) + 22 + le(&tail[static_cast<size_t>(i) + 20], 2) <= tail_size) {
      at = i;
      break;
    }
  }
  if (at < 0) fail("not a zip archive (no end-of-central-directory record); an .npz is a zip file");
  const uint8_t* end = &tail[static_cast<size_t>(at)];
  const uint64_t end_offset = size - tail_size + static_cast<uint64_t>(at);
  if (le(end + 4, 2) != 0 || le(end + 6, 2) != 0) fail("multi-disk zip archives are not supported");
  uint64_t count = le(end + 10, 2), dir_size = le(end + 12, 4), dir_offset = le(end + 16, 4);
  if (count == 0xFFFF || dir_size == 0xFFFFFFFF || dir_offset == 0xFFFFFFFF) {
    // ZIP64: a locator just before the record points at the ZIP64 end record.
    uint8_t locator[20], end64[56];
    if (end_offset < 20) fail("ZIP64 locator missing");
    read_at(end_offset - 20, locator, 20, "ZIP64 end-of-directory locator");
    if (le(locator, 4) != kZip64Locator) fail("ZIP64 sizes without a ZIP64 end-of-directory locator");
    read_at(le(locator + 8, 8), end64, 56, "ZIP64 end-of-directory record");
    if (le(end64, 4) != kZip64End) fail("bad ZIP64 end-of-directory record");
    count = le(end64 + 32, 8);
    dir_size = le(end64 + 40, 8);
    dir_offset = le(end64 + 48, 8);
  }
  if (dir_size > kMaxDirectoryBytes) fail("central directory of " + std::to_string(dir_size) + " bytes is over the 64 MiB limit");
  if (dir_offset > end_offset || dir_size > end_offset - dir_offset)
    fail("central directory (" + std::to_string(dir_size) + " bytes at " + std::to_string(dir_offset) +
         ") lies past the end-of-directory record at " + std::to_string(end_offset));
  if (count > dir_size / 46) fail("central directory declares " + std::to_string(count) + " entries in " +
                                  std::to_string(dir_size) + " bytes");
  std::vector<uint8_t> dir(static_cast<size_t>(dir_size));
  read_at(dir_offset, dir.data(), dir.size(), "central directory");
  std::unordered_set<std::string> names;
  size_t pos = 0;
  for (uint64_t k = 0; k < count; ++k) {
    if (dir.size() - pos < 46 || le(&dir[pos], 4) != kDirectoryEntry)
      fail("central directory entry " + std::to_string(k) + " is malformed");
    const uint8_t* e = &dir[pos];
    ZipEntry entry;
    entry.flags = static_cast<uint16_t>(le(e + 8, 2));
    entry.method = static_cast<uint16_t>(le(e + 10, 2));
    entry.crc32 = static_cast<uint32_t>(le(e + 16, 4));
    entry.compressed_size = le(e + 20, 4);
    entry.size = le(e + 24, 4);
    const size_t name_len = le(e + 28, 2), extra_len = le(e + 30, 2), comment_len = le(e + 32, 2);
    entry.local_header_offset = le(e + 42, 4);
    if (dir.size() - pos - 46 < name_len + extra_len + comment_len)
      fail("central directory entry " + std::to_string(k) + " runs past the directory");
    entry.name.assign(reinterpret_cast<const char*>(e + 46), name_len);
    // ZIP64 extra field (id 1): 8-byte values for those of size, compressed size, offset that are 0xFFFFFFFF.
    const uint8_t* extra = e + 46 + name_len;
    for (size_t x = 0; x + 4 <= extra_len;) {
      const uint64_t id = le(extra + x, 2), len = le(extra + x + 2, 2);
      if (x + 4 + len > extra_len) fail("entry " + entry.name + ": malformed extra field");
      if (id == 1) {
        size_t f = x + 4;
        for (uint64_t* field : {&entry.size, &entry.compressed_size, &entry.local_header_offset}) {
          if (*field != 0xFFFFFFFF) continue;
          if (f + 8 > x + 4 + len) fail("entry " + entry.name + ": ZIP64 extra field is too short");
          *field = le(extra + f, 8);
          f += 8;
        }
      }
      x += 4 + len;
    }
    if (!names.insert(entry.name).second) fail("entry '" + entry.name + "' appears twice");
    entries_.push_back(std::move(entry));
    pos += 46 + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::unique_ptr<ByteSource> ZipReader::open(const ZipEntry& entry) {
  const std::string where = path_ + ": entry " + entry.name;
  const auto fail = [&](const std::string& what) -> void { throw FormatError(where + ": " + what); };
  if (entry.flags & 1) fail("is encrypted");
  if (entry.method != 0 && entry.method != 8)
    fail("compression method " + std::to_string(entry.method) + " is not supported (stored and deflate are)");
  if (entry.method == 0 && entry.size != entry.compressed_size)
    fail("is stored but its sizes differ (" + std::to_string(entry.size) + " and " +
         std::to_string(entry.compressed_size) + ")");
  uint8_t local[30];
  const uint64_t size = file_.size();
  if (entry.local_header_offset > size || size - entry.local_header_offset < 30 ||
      std::fseek(file_.get(), static_cast<long>(entry.local_header_offset), SEEK_SET) != 0 ||
      std::fread(local, 1, 30, file_.get()) != 30 || le(local, 4) != kLocalHeader)
    fail("no local header at byte " + std::to_string(entry.local_header_offset));
  const uint64_t data = entry.local_header_offset + 30 + le(local + 26, 2) + le(local + 28, 2);
  if (data > size || entry.compressed_size > size - data)
    fail(std::to_string(entry.compressed_size) + " bytes of data at byte " + std::to_string(data) +
         " run past the end of the " + std::to_string(size) + "-byte file");
  if (std::fseek(file_.get(), static_cast<long>(data), SEEK_SET) != 0) fail("cannot seek to its data");
  return std::make_unique<ByteSource>(file_.get(), where,
                                      entry.method == 0 ? ByteSource::Encoding::stored : ByteSource::Encoding::deflate,
                                      entry.compressed_size);
}

void ZipReader::check_complete(const ZipEntry& entry, const ByteSource& source) const {
  if (source.produced() != entry.size)
    throw FormatError(source.name() + ": holds " + std::to_string(source.produced()) +
                      " bytes but the zip directory says " + std::to_string(entry.size));
  if (source.crc32() != entry.crc32)
    throw FormatError(source.name() + ": CRC-32 mismatch (the data is corrupt)");
}

}  // namespace trident
