#include "tandem/base/environment.h"

#include <climits>
#include <cstdlib>

namespace tandem {

int environment_number(std::initializer_list<const char*> variables, long minimum) {
  for (const char* variable : variables) {
    const char* value = std::getenv(variable);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long number = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && number >= minimum && number <= INT_MAX)
      return static_cast<int>(number);
  }
  return -1;
}

}  // namespace tandem
