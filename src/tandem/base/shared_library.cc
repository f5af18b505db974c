#include "tandem/base/shared_library.h"

#include <dlfcn.h>

#include "tandem/base/error.h"

namespace tandem {

void* open_shared_library(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  return nullptr;
}

std::string shared_library_error() {
  const char* text = dlerror();
  return text == nullptr ? std::string() : std::string(text);
}

void* library_symbol(void* handle, const char* library, const char* symbol) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    TANDEM_THROW(Error, library, " has no ", symbol, ": a version older than tandem was built for");
  }
  return address;
}

std::string dotted_version(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace tandem
