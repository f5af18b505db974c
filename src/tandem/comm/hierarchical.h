#pragma once
// Collectives over several devices per process and several processes: the
// replica threads of a process form an in-process group, and local rank 0 of
// every process (the leader) talks to the other leaders over the job's
// process communicator (MPI under mpirun, gloo under tandem launch). Global rank
// = process rank x local size + local rank; every process must hold the same
// number of local ranks.
//
// All-reduce, in three steps:
//  1. reduce inside the process (in-process all-reduce),
//  2. the leaders all-reduce across processes (MPI or gloo),
//  3. broadcast back inside the process.
// All-gather: gather inside, leaders all-gather the process blocks, broadcast
// inside. Broadcast: inside the root's process to its leader, across leaders,
// inside every process. Local ranks wait 5 s longer than CommOptions::
// timeout, so that a stall between processes is reported by the leader's
// call (naming the process) before a local wait times out with a reason that
// names local ranks only. Reduce-scatter: reduce inside the process,
// reduce-scatter between the leaders (a process's ranks own one contiguous
// block), and each rank takes its segment of the block.

#include <memory>

#include "tandem/comm/communicator.h"
#include "tandem/comm/inprocess.h"

namespace tandem::comm {

class HierarchicalGroup {
 public:
  // Collective across processes (creates the leaders' communicator):
  // every process calls it, from its main thread, with the same local_size.
  // Throws CommError when processes disagree on local_size.
  HierarchicalGroup(int local_size, CommOptions options = {});
  // The same over a given communicator across the processes (an elastic
  // job's generation, comm/elastic_group.h): rank = its rank. The group
  // shares it; nothing else may use it while the group does.
  HierarchicalGroup(int local_size, std::shared_ptr<Communicator> processes,
                    CommOptions options = {});
  ~HierarchicalGroup();

  int local_size() const;
  int process_rank() const;
  int process_count() const;
  // The communicator of local rank `local_rank` (global rank
  // process_rank() * local_size() + local_rank), for that rank's thread.
  std::unique_ptr<Communicator> communicator(int local_rank);

  struct State;  // shared with the communicators (defined in hierarchical.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tandem::comm
