#pragma once
// Numbers from environment variables (a launcher's ranks, MPI's settings).

#include <initializer_list>

namespace tandem {

// The value of the first of `variables` that holds a whole base-10 number
// in [minimum, INT_MAX]; -1 when none does (unset, text, out of range).
int environment_number(std::initializer_list<const char*> variables, long minimum);

}  // namespace tandem
