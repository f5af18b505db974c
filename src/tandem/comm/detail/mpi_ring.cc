// Rings of point-to-point messages for the MPI backend (detail/mpi_ring.h).
#include "tandem/config.h"
#if TANDEM_HAVE_MPI
#include "tandem/comm/detail/mpi_ring.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tandem/comm/detail/mpi_runtime.h"
#include "tandem/comm/detail/reduce_kernels.h"

namespace tandem::comm::detail {
namespace {

// A ring step's message goes in pieces of this many bytes, all posted at
// once: over TCP between hosts, one message of 512 KiB or more reached
// 60-80% of a 1 Gbit/s link, pieces of 64-128 KiB 94-100%.
constexpr int64_t kRingPieceBytes = int64_t{1} << 17;

// Sends `count` elements to the next rank while receiving as many from the
// previous one.
void ring_step(const MpiRing& ring, const void* send, void* receive, int count, MPI_Datatype type,
               const Call& call, const char* what, std::shared_ptr<const void> scratch = nullptr) {
  const int next = (ring.rank + 1) % ring.size, previous = (ring.rank + ring.size - 1) % ring.size;
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  const int piece = std::max(1, static_cast<int>(kRingPieceBytes / std::max(1, type_bytes)));
  std::vector<MPI_Request> requests;
  for (int begin = 0; begin < count; begin += piece) {
    const int n = std::min(piece, count - begin);
    const size_t offset = static_cast<size_t>(begin) * static_cast<size_t>(type_bytes);
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Irecv(static_cast<char*>(receive) + offset, n, type, previous, 0, ring.comm,
                        &requests.back()),
              what);
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(static_cast<const char*>(send) + offset, n, type, next, 0, ring.comm,
                        &requests.back()),
              what);
  }
  for (MPI_Request& r : requests) ring.wait(r, call, what, scratch);
}

}  // namespace

void ring_reduce_scatter(const MpiRing& ring, const Call& call, MPI_Datatype type) {
  // Step s sends the partial sum of segment (rank - s - 1) and receives
  // that of segment (rank - s - 2) from the previous rank, adding this
  // rank's own; after n - 1 steps segment `rank` holds every rank's.
  const int size = ring.size, rank = ring.rank;
  const int64_t segment = call.count / size;
  if (segment == 0) return;
  const size_t bytes = static_cast<size_t>(segment) * dtype_size(call.dtype);
  const auto own = [&](int index) {
    return static_cast<const char*>(call.input.raw_data()) +
           static_cast<size_t>((index % size + size) % size) * bytes;
  };
  if (size == 1) {
    std::memcpy(call.output.raw_data(), own(0), bytes);
    return;
  }
  // Received partial sums and two accumulators (one is being sent while the
  // other fills), from the caching allocator (fresh pages for a 16 MiB
  // segment cost more than the step); MPI may still write them after a
  // failure, so they are quarantined with the call's tensors.
  const auto scratch = std::make_shared<const Tensor>(Tensor::empty(
      Shape{3 * segment}, call.dtype, call.input.device(), MemoryCategory::communication));
  char* received = static_cast<char*>(scratch->raw_data());
  char* sums[2] = {received + bytes, received + 2 * bytes};
  const ReduceOp op = call.op == ReduceOp::mean ? ReduceOp::sum : call.op;
  for (int s = 0; s + 1 < size; ++s) {
    const void* send = s == 0 ? own(rank - 1) : sums[(s - 1) % 2];
    ring_step(ring, send, received, static_cast<int>(segment), type, call,
              "ring reduce-scatter step", scratch);
    const bool last = s + 2 == size;
    void* out = last ? call.output.raw_data() : sums[s % 2];
    const void* parts[2] = {received, own(rank - s - 2)};
    kernels::reduce_range(call.dtype, op, 1.0f, parts, 2, &out, 1, 0, segment);
  }
}

void ring_all_gather(const MpiRing& ring, const Call& call, MPI_Datatype type) {
  // Step s passes on block (rank - s) and receives block (rank - s - 1).
  const int size = ring.size, rank = ring.rank;
  const size_t bytes = static_cast<size_t>(call.count) * dtype_size(call.dtype);
  char* out = static_cast<char*>(call.output.raw_data());
  const auto block = [&](int index) {
    return out + static_cast<size_t>((index % size + size) % size) * bytes;
  };
  if (block(rank) != call.input.raw_data()) std::memcpy(block(rank), call.input.raw_data(), bytes);
  if (call.count == 0) return;
  for (int s = 0; s + 1 < size; ++s) {
    ring_step(ring, block(rank - s), block(rank - s - 1), static_cast<int>(call.count), type, call,
              "ring all-gather step");
  }
}

}  // namespace tandem::comm::detail
#endif
