#pragma once
// Shared libraries loaded when first used (dlopen) and their functions bound
// by name: how the CUDA back ends reach cuBLASLt, cuDNN and NCCL without
// linking them (see tensor/cuda/runtime.h's callers).

#include <cstddef>
#include <initializer_list>
#include <string>

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

// major * 10000 + minor * 100 + patch (as cuBLASLt, cuDNN 9 and NCCL 2.9+
// encode their versions) as "major.minor.patch".
std::string dotted_version(size_t encoded);

}  // namespace tandem
