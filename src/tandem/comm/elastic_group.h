#pragma once
// Membership of an elastic job (issue: elastic data parallelism): the
// members that form each generation's gloo communicator, their liveness,
// and their agreement on the next generation when a member is lost or a
// new one asks to join. MPI 4.1 cannot drop a lost rank; a gloo group can
// be formed again over the survivors under a new prefix, so membership
// lives here, above the communicator, through the rendezvous store.
//
// Members have stable ids (the first generation's 0..n-1, then one per
// joiner). Each member's thread writes a heartbeat to the store every
// heartbeat_every and watches the other members': one silent for
// peer_timeout, or marked lost (mark_lost: its launcher saw the process
// end), is given up, and the current communicator is aborted so that
// collectives waiting for it end at once.
//
// regroup() is how every live member moves to the next generation: it
// announces itself, and the first member to arrive decides the new
// membership (the old members that arrived, waiting for each until it
// arrives, is marked lost, or falls silent; plus the joiners waiting) and
// writes it; every member then builds the generation's communicator (rank
// = its index among the sorted ids). A member the decider gave up learns
// it and throws. A decider or member lost during the regroup makes the
// others retry with the generation after: a decider once its heartbeat has
// been still for peer_timeout, a member lost after the decision once the
// new communicator's assembly times out (CommOptions::timeout).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

class Store;

struct ElasticOptions {
  CommOptions comm;  // each generation's communicator
  std::chrono::milliseconds heartbeat_every{500};
  // A member whose heartbeat has not changed for this long is lost.
  std::chrono::milliseconds peer_timeout{10'000};
  // Fewer live members than this end the job (regroup throws CommError).
  int min_members = 1;
  // More members than this are not taken in: joiners wait.
  int max_members = 1 << 20;
  // How long a joiner waits to be taken in.
  std::chrono::milliseconds join_timeout{300'000};
};

struct Membership {
  int64_t generation = 0;
  std::vector<int> members;  // ids, ascending; rank r is members[r]
  int rank = 0;              // this member's
};

class ElasticGroup {
 public:
  // Member `id` (0..initial_members-1) of the first generation of the job
  // under `prefix`, whose store is served at host:port. Collective over
  // the first generation: waits until all of them have made its
  // communicator.
  static std::unique_ptr<ElasticGroup> start(const std::string& host, int port,
                                             const std::string& prefix, int id, int initial_members,
                                             ElasticOptions options = {});
  // A new member of a running job: takes the next id and waits until the
  // members take it in (their next regroup); throws Timeout after
  // options.join_timeout.
  static std::unique_ptr<ElasticGroup> join(const std::string& host, int port,
                                            const std::string& prefix, ElasticOptions options = {});
  // Marks member `id` lost at once (for a launcher that saw its process end).
  static void mark_lost(const std::string& host, int port, const std::string& prefix, int id,
                        const std::string& why);
  // Whether every member of the first generation has made its communicator
  // (before that, a lost member leaves the others waiting for it to
  // connect: a launcher then ends the job instead).
  static bool formed(Store& store, const std::string& prefix, int initial_members);
  // Leaves the job: this member is marked lost, so a regroup need not wait.
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  int id() const;
  // The current generation and its communicator (replaced by regroup()).
  const Membership& membership() const;
  Communicator& communicator();
  // The same, for a holder that outlives nothing of the group's: it must
  // stop using it before the next regroup().
  std::shared_ptr<Communicator> shared_communicator();
  // Whether a new member waits to be taken in, as the heartbeat thread
  // last read the store (no I/O here; up to heartbeat_every late). Members
  // should agree on acting on it, e.g. with an all-reduce of the answer.
  bool joiners_waiting();
  // Moves to the next generation with every live member (see above) and
  // returns it. Throws PeerFailed when the others gave this member up,
  // CommError when fewer than min_members are left.
  const Membership& regroup();

  // For tests: stops this member's heartbeats without leaving, as a
  // process that is stopped or cut off.
  void stop_heartbeats_for_test();

  struct State;  // elastic_group.cc

 private:
  explicit ElasticGroup(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tandem::comm
