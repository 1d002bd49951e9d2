// Every failure mojo-jit reports is one of these: a typed exception whose
// what() is a single line saying what was asked, what went wrong and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace mojo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the caller: unknown op, wrong dtype, shape mismatch, null or
// misaligned pointer, bad arch string, unknown scalar.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};
class UnknownOpError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};
class DTypeError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};
class ShapeError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};
class PointerError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};
class ArchError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

// A template that does not compile. what() is one line; log() holds the
// compiler's full output and the source lines around each error.
class CompileError : public Error {
 public:
  CompileError(const std::string& summary, std::string log)
      : Error(summary), log_(std::move(log)) {}
  const std::string& log() const noexcept { return log_; }

 private:
  std::string log_;
};

// A CUDA driver call that failed: carries the call and the driver's error.
class DeviceError : public Error {
 public:
  DeviceError(const std::string& message, int code = 0) : Error(message), code_(code) {}
  int code() const noexcept { return code_; }  // the CUresult, or 0 from the cpu device

 private:
  int code_;
};

// No libcuda.so.1, or no GPU: everything up to PTX/cubin still works.
class NoDeviceError : public DeviceError {
 public:
  explicit NoDeviceError(const std::string& message) : DeviceError(message, -1) {}
};

// Offline mode (MOJO_JIT_OFFLINE=1): the specialization is in no cache layer
// and compiling is not allowed.
class CacheMissError : public Error {
 public:
  using Error::Error;
};

// A bug in mojo-jit itself: one of its parts broke what another relies on (never the caller's input, which
// gets the errors above). what() starts with "internal error: "; please report it.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error("internal error: " + message) {}
};

// The template registry has no template of that name.
class TemplateNotFoundError : public Error {
 public:
  using Error::Error;
};

}  // namespace mojo
