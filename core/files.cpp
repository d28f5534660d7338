// Regular-file-only input opening (non-blocking open, then fstat) and output path checks.
#include "trident/core/files.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "trident/core/error.h"

#ifndef _WIN32
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace trident {
namespace {

namespace fs = std::filesystem;

// The temporary a checkpoint writer puts beside NAME: "." NAME "." 16 hex digits ".tmp".
constexpr size_t kTemporaryExtraChars = 1 + 1 + 16 + 4;
constexpr size_t kMessagePathChars = 200;

#ifndef _WIN32
std::string kind_of_mode(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}
#endif

}  // namespace

std::string path_for_message(const std::string& path) {
  if (path.size() <= kMessagePathChars) return path;
  return path.substr(0, kMessagePathChars / 2) + "...(" + std::to_string(path.size()) +
         " characters)..." + path.substr(path.size() - kMessagePathChars / 4);
}

InputFile::InputFile(InputFile&& other) noexcept : file_(other.file_), size_(other.size_) {
  other.file_ = nullptr;
}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = other.file_;
    size_ = other.size_;
    other.file_ = nullptr;
  }
  return *this;
}

InputFile::~InputFile() {
  if (file_ != nullptr) std::fclose(file_);
}

InputFile open_regular_file(const std::string& path, const std::string& kind) {
  const std::string where = path_for_message(path) + ": ";
  InputFile in;
#ifdef _WIN32
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw FormatError(where + "is a directory, not a " + kind);
  in.file_ = std::fopen(path.c_str(), "rb");
  if (in.file_ == nullptr) throw FormatError(where + "cannot open " + kind + ": " + std::strerror(errno));
  in.size_ = fs::file_size(path, ec);
  if (ec) throw FormatError(where + "cannot determine the file size: " + ec.message());
#else
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw FormatError(where + "cannot open " + kind + ": " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw FormatError(where + "cannot stat " + kind + ": " + std::strerror(err));
  }
  const std::string what = kind_of_mode(st.st_mode);
  if (!what.empty()) {
    ::close(fd);
    throw FormatError(where + "is " + what + ", not a " + kind + " (only regular files are read)");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  in.file_ = ::fdopen(fd, "rb");
  if (in.file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    throw FormatError(where + "cannot open " + kind + ": " + std::strerror(err));
  }
  in.size_ = static_cast<uint64_t>(st.st_size);
#endif
  return in;
}

std::string non_regular_file_kind(const std::string& path) {
#ifdef _WIN32
  std::error_code ec;
  return fs::is_directory(path, ec) ? "a directory" : "";
#else
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return kind_of_mode(st.st_mode);
#endif
}

void check_output_file_path(const std::string& path, const std::string& option) {
  if (path.empty())
    throw UsageError(option + " '': the file name is empty (give a file path, e.g. " + option +
                     " run.safetensors)");
  const std::string shown = option + " '" + path_for_message(path) + "': ";
  const fs::path target(path);
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw UsageError(shown + "names a directory; give a file path inside it");
  long name_max = 255;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
#ifndef _WIN32
  errno = 0;
  const long limit = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (limit > 0) name_max = limit;
#endif
  if (name.size() + kTemporaryExtraChars > static_cast<size_t>(name_max))
    throw UsageError(shown + "the file name is " + std::to_string(name.size()) +
                     " bytes; at most " + std::to_string(name_max - static_cast<long>(kTemporaryExtraChars)) +
                     " fit (the file system allows " + std::to_string(name_max) +
                     " and the temporary written beside it adds " +
                     std::to_string(kTemporaryExtraChars) + ")");
#ifdef PATH_MAX
  if (path.size() + kTemporaryExtraChars >= PATH_MAX)
    throw UsageError(shown + "the path is " + std::to_string(path.size()) + " bytes; at most " +
                     std::to_string(PATH_MAX - 1 - kTemporaryExtraChars) + " are supported");
#endif
  const std::string what = non_regular_file_kind(path);
  if (!what.empty()) throw UsageError(shown + "is " + what + ", not a regular file");
  std::error_code ec;
  const fs::file_status dir_status = fs::status(dir, ec);
  if (!fs::exists(dir_status))
    throw UsageError(shown + "directory '" + path_for_message(dir.string()) +
                     "' does not exist (create it first)");
  if (!fs::is_directory(dir_status))
    throw UsageError(shown + "'" + path_for_message(dir.string()) + "' is not a directory");
#ifndef _WIN32
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError(shown + "cannot create files in directory '" + path_for_message(dir.string()) +
                     "': " + std::strerror(errno));
#endif
}

}  // namespace trident
