#pragma once
// Cross-replica agreement: small exchanges of host values between every
// replica of every process (sums of doubles, flags, counts, a value from the
// chief), implemented once over the strategy's communicators, exactly:
//  1. Each replica's values travel bit for bit (an all-gather of their
//     bytes), never rounded to a wire dtype.
//  2. Every process then combines all of them in global replica order, so
//     each process computes the same double whatever the topology, and a
//     mirrored run with N replicas adds exactly what an N-process run adds.
// These are collectives: every process calls the same functions in the same
// order with vectors of the same length (a length that differs fails on
// every rank, through the communicators' call check, instead of hanging).
// With one process no communication happens. Called from the main thread,
// except the *_in_group functions, which a replica calls on its own thread
// with its communicator (every rank of the group calls them together).

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

// Every global replica's values, concatenated in global replica order: local
// replica i contributes per_local[i] (one vector per local replica, all of
// the same length n); the result has global_replicas() * n values.
std::vector<double> gather_over_replicas(Strategy& strategy,
                                         const std::vector<std::vector<double>>& per_local);

// The element-wise sums of every global replica's values (see above).
std::vector<double> sum_over_replicas(Strategy& strategy,
                                      const std::vector<std::vector<double>>& per_local);

// One vector per process (all of the same length n): every process's
// values concatenated in process order (processes * n values).
std::vector<int64_t> gather_over_processes(Strategy& strategy, std::span<const int64_t> values);

// One vector per process: the element-wise sums over processes, exact.
std::vector<int64_t> sum_over_processes(Strategy& strategy, std::span<const int64_t> values);

// True on every process when any process passes true.
bool any_process(Strategy& strategy, bool flag);

// The chief process's values, on every process (others pass vectors of the
// same length, whose contents are ignored).
std::vector<double> broadcast_from_chief(Strategy& strategy, std::span<const double> values);

// Every rank's values (all of the same length n), concatenated in rank
// order, bit for bit: rank r's at [r * n, (r + 1) * n).
std::vector<double> gather_in_group(comm::Communicator& comm, std::span<const double> values);
// The sum over the group's ranks, added in rank order: the same double on every rank.
double sum_in_group(comm::Communicator& comm, double value);

}  // namespace tandem::distribute
