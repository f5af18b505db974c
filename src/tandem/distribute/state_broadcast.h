#pragma once
// An engine state sent from one process to every other one over a
// communicator: how an elastic job's members (a joiner too) all take the
// training state of the new generation's rank 0 (issue: elastic data
// parallelism). The state travels as one buffer: a JSON header (metadata,
// each tensor's name, dtype and shape) and the tensors' bytes.

#include "tandem/comm/communicator.h"
#include "tandem/distribute/engine_state.h"

namespace tandem::distribute {

// A deep copy of `state` (save_state() gives the live parameters, not copies).
EngineState copy_state(const EngineState& state);

// Rank 0's `state` on every rank (collective: every rank of `comm` calls
// it, from one thread; the others pass null). Host tensors only. Throws
// CommError on every rank when rank 0 passes null (it has no state to
// give), IoError when what arrives does not parse, and what the
// communicator throws.
EngineState broadcast_state(comm::Communicator& comm, const EngineState* state);

}  // namespace tandem::distribute
