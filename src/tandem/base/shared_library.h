#pragma once
// Shared libraries loaded when first used (dlopen) and their functions bound
// by name: how the CUDA back ends reach cuBLASLt, cuDNN and NCCL without
// linking them (see tensor/cuda/runtime.h's callers).

#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/base/error.h"

namespace tandem {

// The handle of the first of `names` that loads, or nullptr (the reason is
// then shared_library_error()).
void* open_shared_library(std::initializer_list<const char*> names);

// dlerror()'s text for the last failed load, or "" when there is none.
std::string shared_library_error();

// The address of `symbol` in `handle`; throws Error naming `library` and the
// symbol when it is missing (a version older than tandem was built for).
void* library_symbol(void* handle, const char* library, const char* symbol);

template <typename F>
void bind_symbol(void* handle, const char* library, const char* symbol, F& slot) {
  slot = reinterpret_cast<F>(library_symbol(handle, library, symbol));
}

// A library's table of functions, loaded on the first get(): the first of
// `files` that loads, its functions bound by `bind` (bind_symbol for each).
// When that fails, every get() throws the same Error, naming the library
// and where to put it.
template <typename Table>
class LazyLibrary {
 public:
  using Binder = void (*)(void* handle, const char* library, Table& table);
  LazyLibrary(const char* title, std::vector<const char*> files, Binder bind)
      : title_(title), files_(std::move(files)), bind_(bind) {}

  const Table& get() {
    std::call_once(once_, [this] {
      void* handle = nullptr;
      const char* loaded = nullptr;
      for (const char* file : files_) {
        if ((handle = open_shared_library({file})) != nullptr) {
          loaded = file;
          break;
        }
      }
      if (handle == nullptr) {
        failure_ = std::string("cannot load ") + title_ + " (" + files_.front() +
                   "): " + shared_library_error() + " (put the CUDA libraries on LD_LIBRARY_PATH)";
        return;
      }
      try {
        bind_(handle, loaded, table_);
      } catch (const Error& e) {
        failure_ = e.what();
      }
    });
    if (!failure_.empty()) TANDEM_THROW(Error, failure_);
    return table_;
  }

 private:
  const char* title_;
  std::vector<const char*> files_;
  Binder bind_;
  std::once_flag once_;
  std::string failure_;
  Table table_{};
};

// major * 10000 + minor * 100 + patch (as cuBLASLt, cuDNN 9 and NCCL 2.9+
// encode their versions) as "major.minor.patch".
std::string dotted_version(size_t encoded);

}  // namespace tandem
