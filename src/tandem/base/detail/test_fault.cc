#include "tandem/base/detail/test_fault.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tandem::detail {

void maybe_raise_test_fault(const char* variable, int rank, int64_t count) {
  const char* spec = std::getenv(variable);
  if (spec == nullptr) return;
  int at_rank = -1;
  long long at_count = 0;
  char how[8] = {};
  if (std::sscanf(spec, "%d:%lld:%7s", &at_rank, &at_count, how) < 2) return;
  if (at_rank == rank && at_count == count)
    ::raise(std::string_view(how) == "stop" ? SIGSTOP : SIGKILL);
}

}  // namespace tandem::detail
