#pragma once
// Private to the MPI backend (TANDEM_HAVE_MPI builds only): reduce-scatter
// and all-gather as rings of point-to-point messages. libnbc's
// MPI_Ireduce_scatter_block reduces the whole buffer to one rank and
// scatters it, and its MPI_Iallgather reached 60% of a 1 Gbit/s link; a
// ring moves (n - 1) / n of the buffer through each link at its rate.

#include <mpi.h>

#include <functional>
#include <memory>

#include "tandem/comm/communicator.h"

namespace tandem::comm::detail {

struct MpiRing {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  // Waits for one request of `call` (the communicator's wait, which watches
  // the control channel and the deadline, and keeps `scratch` alive if it
  // gives up).
  std::function<void(MPI_Request&, const Call& call, const char* what,
                     std::shared_ptr<const void> scratch)>
      wait;
};

// call.output gets this rank's segment (call.count / size elements) of the
// sum (max, min) over ranks of call.input; a mean is left a sum.
void ring_reduce_scatter(const MpiRing& ring, const Call& call, MPI_Datatype type);
// call.output gets every rank's call.input (call.count elements each) in rank order.
void ring_all_gather(const MpiRing& ring, const Call& call, MPI_Datatype type);

}  // namespace tandem::comm::detail
