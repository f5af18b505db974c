// Fault test: rank 1 dies (SIGKILL) in the middle of a run of all-reduces. The
// surviving ranks must not hang: the launcher tears the job down, or a
// collective fails; either way the job ends with a non-zero status.
#include <csignal>
#include <cstdio>

#include "tandem/comm/mpi.h"

int main() {
  using namespace tandem;
  comm::apply_recommended_mpi_settings();
  auto comm = comm::make_mpi_communicator();
  Tensor buffer = Tensor::full(Shape{1 << 16}, 1.0f);
  for (int step = 0; step < 1000000; ++step) {
    if (comm->rank() == 1 && step == 50) std::raise(SIGKILL);
    comm->all_reduce(buffer, comm::ReduceOp::mean);
  }
  std::printf("rank %d finished without noticing the dead rank\n", comm->rank());
  return 0;
}
