#pragma once
// The fault tests' hook: a process kills (SIGKILL) or stops (SIGSTOP)
// itself at a chosen point, so that a test loses a worker at an exact step
// rather than at a time. Inert unless the test sets the variable.

#include <cstdint>

namespace tandem::detail {

// Raises the signal when `variable` holds "RANK:COUNT" (SIGKILL) or
// "RANK:COUNT:stop" (SIGSTOP) and RANK == rank and COUNT == count.
void maybe_raise_test_fault(const char* variable, int rank, int64_t count);

}  // namespace tandem::detail
