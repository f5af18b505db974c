#pragma once
// The parameter-server engine (make_parameter_server_engine, engine.h): the
// strategy's replicas are workers, and the parameters, the optimizer and its
// state live on parameter-server shards (variable_partition.h says which
// shard holds what). In one process the shards are objects that the pushing
// worker's thread updates under the server's lock, not threads of their own:
// on a machine whose cores all run workers, server threads would only take
// cores from them.
//
// A worker repeatedly takes a share of a batch (step() hands each batch's
// shares to the workers and returns without waiting for them), pulls the
// current parameters, computes its gradient and pushes it. What a push does
// depends on ParameterServerOptions::max_staleness S:
//  - S unset (fully asynchronous, TensorFlow 2's semantics): the shards apply
//    each gradient as it arrives, the mean over the worker's own rows at the
//    full learning rate.
//  - S >= 1 (bounded staleness): the same, but a worker may only start a
//    step (pull) when, counting every worker then computing, no gradient in
//    flight can reach a staleness above S; so no applied gradient ever
//    exceeds S. The bound is on the staleness of each applied gradient, the
//    quantity the convergence results bound and the histogram reports, and
//    not on clocks as in Ho et al.'s SSP: with a clock bound a persistent
//    straggler holds every worker to its pace after S steps, while here a
//    worker twice as fast runs free whenever S >= 2. With N workers
//    computing at once the staleness reaches N - 1, so S < N - 1 also limits
//    how many compute at the same time.
//  - S = 0 (synchronous rounds): worker r computes share r of every batch at
//    the same parameters, and the round's update is the mean gradient over
//    its rows: the step mirrored training takes. With backup workers B, a
//    round's update is the mean over the first N - B gradients to arrive;
//    gradients that arrive after their round was applied are dropped, and
//    so are the shares of rounds a worker reaches too late to join (their
//    rows are counted as dropped). An all-reduce cannot do this: every rank
//    must contribute to every reduction, so a late rank holds everyone up.
// Dropout streams are seeded per (seed, step, worker) as under the other
// engines. Cross-replica layers (synchronised batch norm) normalise over the
// worker's own rows: workers are never in step with each other.
//
// Loss scaling: one scaler on the server; a worker scales its loss by the
// scale it pulled, unscales and checks its own gradient, and the server
// skips non-finite gradients (or rounds) and adjusts the scale.
// Checkpoints hold the server's parameters, worker 0's buffers and the
// optimizer state under the replicated optimizer's names, so they load into
// any engine and replica count, and back.

#include <memory>

#include "tandem/distribute/engine.h"
#include "tandem/distribute/variable_partition.h"

namespace tandem::distribute {

struct RemoteWorkers;

// The strategy's replicas are the workers; options.parameter_server says
// the rest. With `remote` (the server rank of a job across processes,
// parameter_server_processes.h) replica r's work goes to the process behind
// remote->links[r], and the local replicas only hold a copy of the model
// (for evaluation and the link's buffers). Throws what check_engine_options
// throws, and InvalidArgument for gradient accumulation or ZeRO (neither
// applies to a parameter server).
std::unique_ptr<Engine> make_parameter_server_engine(Strategy& strategy, const ModelBuilder& build,
                                                     const EngineOptions& options,
                                                     std::shared_ptr<RemoteWorkers> remote = {});

}  // namespace tandem::distribute
