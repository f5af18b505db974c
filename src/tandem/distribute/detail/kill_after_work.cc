// The fault tests' hook into the parameter server (engine_parts.h).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tandem/comm/launch.h"
#include "tandem/distribute/detail/engine_parts.h"

namespace tandem::distribute::detail {

void maybe_kill_after_work(int64_t done) {
  static const char* spec = std::getenv("TANDEM_TEST_KILL_AFTER_WORK");
  if (spec == nullptr) return;
  int rank = -1;
  long long after = 0;
  char how[8] = {};
  if (std::sscanf(spec, "%d:%lld:%7s", &rank, &after, how) < 2) return;
  if (rank == comm::launched_rank() && done == after)
    ::raise(std::string_view(how) == "stop" ? SIGSTOP : SIGKILL);
}

}  // namespace tandem::distribute::detail
