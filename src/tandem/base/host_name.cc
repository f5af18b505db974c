#include "tandem/base/host_name.h"

#include <unistd.h>

namespace tandem {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace tandem
