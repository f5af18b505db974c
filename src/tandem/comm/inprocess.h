#pragma once
// Collectives between the replica threads of one process (virtual devices),
// through shared memory.
//
// Protocol of one collective, on every rank:
//  1. Publish the call (kind, dtype, count, op, root, validity) and the buffer
//     addresses in this rank's slot; small all-reduces also copy their input
//     into a double-buffered staging area.
//  2. Barrier. Every rank checks every slot: an invalid or mismatched call
//     makes every rank throw CommError.
//   3. Small all-reduce: each rank reduces all staged inputs into its own
//     output. Done: the staging area of the other parity is what the next
//     small call writes, and no rank can reach it before every rank has left
//     this call (it needs the next call's barrier).
//  4. Otherwise each rank works on its own part: all-reduce reduces its slice
//     of every rank's input and writes it to every rank's output (so each
//     byte is read and written once: 2 x ranks x size bytes in total, the
//     minimum); reduce-scatter reduces its segment; all-gather and broadcast
//     copy. Then a second barrier, after which inputs may be reused.
// Waits spin for SpinBarrier::kSpinTime, then sleep. A timeout breaks the
// group: later calls on any rank throw CommError.

#include <memory>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

struct InProcessOptions {
  CommOptions comm;
  // All-reduces of at most this many bytes per rank use the one-barrier
  // staged path. Past about 512 B the staged copies cost more cross-core
  // traffic than the second barrier of the sliced path (measured with
  // `tandem bench allreduce --small-message-bytes`).
  int64_t small_message_bytes = 512;
  // False for a group that is only part of a larger one (the process-local
  // ranks of a hierarchical group): its ranks arriving is not every rank
  // arriving, so it leaves the outer collective's start time alone.
  bool whole_group = true;
};

class InProcessGroup {
 public:
  // size ranks (1..1024); throws InvalidArgument otherwise.
  explicit InProcessGroup(int size, InProcessOptions options = {});
  ~InProcessGroup();

  int size() const;
  // The communicator of `rank`, to be used by that rank's thread. The group
  // may be destroyed first: communicators share its state.
  std::unique_ptr<Communicator> communicator(int rank);

  struct State;  // shared by the group's communicators (defined in inprocess.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tandem::comm
