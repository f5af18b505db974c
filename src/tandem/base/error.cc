#include "tandem/base/error.h"

namespace tandem::detail {

void throw_check_failure(const char* condition, const char* file, int line,
                         const std::string& message) {
  std::string text = concat("check failed: ", condition);
  if (!message.empty()) text += concat(" ", message);
  text += concat(" at ", file, ":", line);
  throw Error(text);
}

}  // namespace tandem::detail
