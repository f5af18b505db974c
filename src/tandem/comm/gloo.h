#pragma once
// Collectives between processes over gloo's TCP transport (Debian's
// libgloo, PyTorch's CPU collective engine), for jobs started without MPI
// (`tandem launch`) and for elastic training: a gloo group meets through a
// rendezvous store (comm/store.h), and a new group over other members can
// be formed at any time under a new prefix, which MPI 4.1 without ULFM
// cannot do once a rank is lost.
//
// Failure (communicator.h, contracts 4 and 5): a peer whose process ends
// closes its connections, and every rank's collective throws PeerFailed at
// once; abort(reason) writes the reason to the store and closes this rank's
// connections, so the others throw PeerFailed carrying it. A silent peer
// (stopped, or its host cut off) is noticed only when the collective's
// CommOptions::timeout passes (Timeout); membership above this layer
// watches liveness faster. After any failure the group is broken: later
// calls throw.
//
// gloo writes to sockets without MSG_NOSIGNAL, so the first gloo
// communicator sets SIGPIPE to be ignored (unless the program installed a
// handler of its own): a peer that ends then fails collectives, not this
// process.
//
// Algorithms: gloo's ring all-reduce (bf16/f16 summed pairwise in float32,
// rounded after each addition), all-gather and broadcast; reduce-scatter is
// an all-reduce keeping this rank's segment (twice the traffic of a ring
// reduce-scatter).

#include <memory>
#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/comm/store.h"

namespace tandem::comm {

// Rank `rank` of a group of `size` processes meeting under `prefix` in
// `store`. Collective: every member calls it with the same prefix and size
// (a prefix is used once); waits for them up to options.timeout (Timeout).
// Throws InvalidArgument for a rank outside 0..size-1.
std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store,
                                                     const std::string& prefix, int rank, int size,
                                                     CommOptions options = {});

}  // namespace tandem::comm
