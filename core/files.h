// Opening input files safely (regular files only, so a FIFO or device never blocks a reader) and
// checking an output path before any work is done, with errors that name the path.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace trident {

// A FILE* opened for binary reading, closed at scope exit, with the size the open file had.
class InputFile {
 public:
  InputFile() = default;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  ~InputFile();

  std::FILE* get() const { return file_; }
  uint64_t size() const { return size_; }

 private:
  friend InputFile open_regular_file(const std::string& path, const std::string& kind);
  std::FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

// Opens path for reading without ever blocking: the open is non-blocking and the opened
// descriptor is checked to be a regular file before anything is read (a FIFO, socket, device or
// directory is refused, race-free). `kind` names what was expected ("IDX file", "checkpoint").
// Throws FormatError "<path>: <problem>" on any failure.
InputFile open_regular_file(const std::string& path, const std::string& kind);

// "a FIFO (named pipe)", "a directory", ... for what path names now (symbolic links followed),
// or "" when it is a regular file or does not exist.
std::string non_regular_file_kind(const std::string& path);

// Checks, before any training, that `path` can receive a file written atomically beside it (a
// temporary ".NAME.<16 hex>.tmp" in the same directory, then a rename): not empty, not a
// directory or other non-regular file, its directory exists and is writable, and its name is
// short enough for the temporary's. `option` names where the path came from ("--checkpoint").
// Throws UsageError naming the option, the path and the problem.
void check_output_file_path(const std::string& path, const std::string& option);

// At most this many characters of a path are repeated in a message (the rest is elided), so an
// overlong path still gives a readable error.
std::string path_for_message(const std::string& path);

}  // namespace trident
