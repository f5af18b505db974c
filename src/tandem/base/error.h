#pragma once
// tandem's error hierarchy: one root, tandem::Error, and subclasses a caller can
// act on. The library throws; only the CLI turns an Error into a one-line
// message and an exit status. Two exits stay in the library on purpose: the
// MPI backend's way out of a job that lost a rank (comm/detail/mpi_runtime.cc:
// MPI_Abort at exit, a bounded MPI_Finalize), and the fault injection the
// failure tests ask for (base/detail/test_fault.h).

#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A caller passed a value outside what the function accepts (flag, option, size).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Tensor shapes or dtypes that do not fit together.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A file is missing, unreadable, truncated or malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A collective failed or the ranks disagreed.
class CommError : public Error {
 public:
  using Error::Error;
};

// A collective was abandoned because another rank (or replica) failed or
// aborted the group: the message carries that rank's error. Callers that
// gather errors from several replicas report the original one, not these.
class PeerFailed : public CommError {
 public:
  using CommError::CommError;
};

// A blocking call did not complete in time.
class Timeout : public Error {
 public:
  using Error::Error;
};

// Training diverged (a non-finite loss, or no update for many steps): the
// run's settings, not the program, failed. `tandem train` exits with 3.
class Diverged : public Error {
 public:
  using Error::Error;
};

// The combination asked for exists in principle but is not built.
class NotImplemented : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* condition, const char* file, int line,
                                      const std::string& message);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}
}  // namespace detail

}  // namespace tandem

// Invariant checks: throw tandem::Error naming the condition, the values and file:line.
// Use the typed exceptions above for user-facing argument errors.
#define TANDEM_CHECK(cond, ...)                                                     \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      ::tandem::detail::throw_check_failure(#cond, __FILE__, __LINE__,              \
                                            ::tandem::detail::concat(__VA_ARGS__)); \
  } while (0)

#define TANDEM_CHECK_EQ(a, b, ...)                                                \
  do {                                                                            \
    const auto& tandem_check_a_ = (a);                                            \
    const auto& tandem_check_b_ = (b);                                            \
    if (!(tandem_check_a_ == tandem_check_b_)) [[unlikely]]                       \
      ::tandem::detail::throw_check_failure(                                      \
          #a " == " #b, __FILE__, __LINE__,                                       \
          ::tandem::detail::concat("(", tandem_check_a_, " vs ", tandem_check_b_, \
                                   ") " __VA_OPT__(, ) __VA_ARGS__));             \
  } while (0)

// Throws the given Error subclass with a message built from the arguments.
#define TANDEM_THROW(Kind, ...) throw Kind(::tandem::detail::concat(__VA_ARGS__))
