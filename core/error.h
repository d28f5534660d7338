// Trident's exception types: every failure a user can meet carries a message that says what to do.
#pragma once
#include <stdexcept>
#include <string>

namespace trident {

// Base of every Trident exception; catch this to catch them all.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A backend or device name that does not exist; the message lists what does.
class DeviceNotFound : public Error { using Error::Error; };
// A device allocation that failed; the message gives requested and free bytes.
class OutOfMemory : public Error { using Error::Error; };
// Tensor shapes or dtypes that do not fit the operation.
class ShapeError : public Error { using Error::Error; };
// A malformed input file (IDX data set, checkpoint); the message names the file and the problem.
class FormatError : public Error { using Error::Error; };
// A failed driver or vendor-library call (CUDA, cuBLAS, NCCL, OpenCL, CLBlast, MPI).
class BackendError : public Error { using Error::Error; };
// A bad command-line option or environment variable.
class UsageError : public Error { using Error::Error; };

}  // namespace trident
