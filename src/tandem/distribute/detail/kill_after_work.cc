// The fault tests' hook into the parameter server (engine_parts.h).
#include "tandem/base/detail/test_fault.h"
#include "tandem/comm/launch.h"
#include "tandem/distribute/detail/engine_parts.h"

namespace tandem::distribute::detail {

void maybe_kill_after_work(int64_t done) {
  tandem::detail::maybe_raise_test_fault("TANDEM_TEST_KILL_AFTER_WORK", comm::launched_rank(),
                                         done);
}

}  // namespace tandem::distribute::detail
