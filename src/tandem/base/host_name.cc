#include "tandem/base/host_name.h"

#include <unistd.h>

namespace tandem {

std::string host_name(std::string_view fallback) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return std::string(fallback);
  return name;
}

}  // namespace tandem
