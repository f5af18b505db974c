#pragma once
// Private to the parameter-server strategy across processes
// (parameter_server_processes.h): what its processes say to each other,
// written and read in one place. Frames travel on WorkerLinks.
//
// Between rank 0 (the chief, holding shard 0) and a worker:
//   work      chief -> worker: a WorkOrder, the share's rows, shard 0's
//             values, the worker's buffers
//   gradient  worker -> chief: a GradientReport, shard 0's gradient pieces,
//             the buffers
//   stop      chief -> worker: u64 (1: bound MPI_Finalize, a worker was lost)
// Between a worker and shard rank k >= 1:
//   pull      worker -> shard: u64 version; answered by `values`
//   values    shard -> worker: shard k's values at that version or later
//   push      worker -> shard: ShareId, shard k's gradient pieces; answered
//             by an empty `ack` once stored
// Between the chief and shard rank k >= 1 (the shard answers, nothing more):
//   load      chief -> shard: shard k's values, then its optimizer state
//             (count, then name and tensor each; none at the start)
//   update    chief -> shard: a ShardUpdate; when it asks for them, the
//             shard answers `squares` (f64) and then waits for `norm` (f64)
//   values    chief -> shard (empty): answered by `values`
//   state     chief -> shard (empty): answered by `state` (as in load)
//   stop      chief -> shard
// A worker pushes to every shard rank, and has each push acknowledged,
// before it reports to the chief: so every gradient an update names is
// already on the shards when the update arrives.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/autograd/variable.h"
#include "tandem/distribute/detail/worker_link.h"
#include "tandem/distribute/engine.h"
#include "tandem/distribute/variable_partition.h"

namespace tandem::distribute::detail {

// Where the shards keep the pieces of `parameters`: the same on every
// process (partition_variables is deterministic). LARS and LAMB keep every
// variable whole: their step depends on the whole variable's norms.
std::vector<VariablePiece> server_pieces(const std::vector<Variable>& parameters,
                                         const EngineOptions& options);

// The rows of `whole` that `piece` holds (a view; the whole of a scalar).
Tensor piece_of(const Tensor& whole, const VariablePiece& piece);

// Variables over shard `shard`'s pieces of `whole`, values and gradient
// buffers shared with it (whole must have gradient buffers), in piece
// order; `indices` receives the pieces' indices.
std::vector<Variable> shard_views(const std::vector<Variable>& whole,
                                  const std::vector<VariablePiece>& pieces, int shard,
                                  std::vector<size_t>* indices = nullptr);

// Shard `shard`'s values of `parameters`, in piece order; read marks the
// parameters modified.
void write_shard_values(FrameWriter& out, const std::vector<VariablePiece>& pieces, int shard,
                        const std::vector<Variable>& parameters);
void read_shard_values(FrameReader& in, const std::vector<VariablePiece>& pieces, int shard,
                       std::vector<Variable>& parameters);
// Shard `shard`'s gradient pieces (a flag, then the rows when there is a
// gradient). read_shard_gradients defines the gradients of the variables
// it reads pieces of and leaves the others alone.
void write_shard_gradients(FrameWriter& out, const std::vector<VariablePiece>& pieces, int shard,
                           const std::vector<Variable>& parameters);
void read_shard_gradients(FrameReader& in, const std::vector<VariablePiece>& pieces, int shard,
                          std::vector<Variable>& parameters);
// The squared norm of shard `shard`'s gradient pieces, in f64.
double shard_gradient_squares(const std::vector<VariablePiece>& pieces, int shard,
                              const std::vector<Variable>& parameters);

// A model's buffers (batch norm's running statistics), in named_buffers()
// order; read_buffers throws IoError when they do not fit the model.
void write_buffers(FrameWriter& out, nn::Module& model);
void read_buffers(FrameReader& in, nn::Module& model);

// What a worker computes a share at.
struct WorkOrder {
  int64_t step = 0;         // seeds the random streams
  int64_t global_rows = 0;  // the whole batch's rows
  int64_t divisor = 1;      // the loss sum is divided by this
  double scale = 0.0;       // the loss scale (0: none)
  int64_t version = 0;      // the updates applied when the chief handed it out
  int64_t share = 0;        // the worker's count of shares: names its gradient
};
void write_work(FrameWriter& out, const WorkOrder& order);
WorkOrder read_work(FrameReader& in);

// What a worker's share produced, beside its gradient.
struct GradientReport {
  int64_t rows = 0;
  double loss_sum = 0.0;
  bool finite = true;
  double forward_seconds = 0.0, backward_seconds = 0.0;
  std::vector<double> reports;        // the caller's sums (the Trainer's metrics)
  std::vector<double> shard_squares;  // per shard, with gradient clipping; else empty
};
void write_report(FrameWriter& out, const GradientReport& report);
GradientReport read_report(FrameReader& in);

// One worker's gradient of one share, as stored on the shards.
struct ShareId {
  int64_t worker = 0;
  int64_t share = 0;
  bool operator<(const ShareId& o) const {
    return std::pair(worker, share) < std::pair(o.worker, o.share);
  }
};

// What the chief tells a shard rank to do with the gradients it holds.
struct ShardUpdate {
  bool advance = false;           // counts as an update (a version) for pulls
  bool step = false;              // applies the sum of `sources` (else only drops them)
  std::vector<ShareId> sources;   // added in this order, then times `factor`
  std::vector<ShareId> discards;  // dropped unused (a share of -1: all the worker's)
  double factor = 1.0;
  double learning_rate = 0.0;
  double clip_norm = 0.0;       // the norm to clip against (0: none, or ask)
  bool report_squares = false;  // answer the staged squares, then wait for the norm
};
void write_update(FrameWriter& out, const ShardUpdate& update);
ShardUpdate read_update(FrameReader& in);

// An optimizer state's (name, tensor) list (the shard's own names).
void write_named_tensors(FrameWriter& out,
                         const std::vector<std::pair<std::string, Tensor>>& tensors);
std::vector<std::pair<std::string, Tensor>> read_named_tensors(FrameReader& in);

}  // namespace tandem::distribute::detail
