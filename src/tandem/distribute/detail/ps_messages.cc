#include "tandem/distribute/detail/ps_messages.h"

#include "tandem/base/error.h"
#include "tandem/kernels/reduce.h"
#include "tandem/nn/module.h"

namespace tandem::distribute::detail {
namespace {

// Caps on counts read from a frame, before anything is sized by them.
constexpr uint64_t kMaxReports = 4096;
constexpr uint64_t kMaxShards = 4096;
constexpr uint64_t kMaxShares = uint64_t{1} << 20;
constexpr uint64_t kMaxStateTensors = uint64_t{1} << 20;

void write_shares(FrameWriter& out, const std::vector<ShareId>& shares) {
  out.u64(shares.size());
  for (const ShareId& s : shares) {
    out.u64(static_cast<uint64_t>(s.worker));
    out.u64(static_cast<uint64_t>(s.share));
  }
}

std::vector<ShareId> read_shares(FrameReader& in) {
  const uint64_t n = in.u64();
  if (n > kMaxShares) TANDEM_THROW(IoError, "an update naming ", n, " gradients");
  std::vector<ShareId> shares(static_cast<size_t>(n));
  for (ShareId& s : shares) {
    s.worker = static_cast<int64_t>(in.u64());
    s.share = static_cast<int64_t>(in.u64());
  }
  return shares;
}

}  // namespace

std::vector<VariablePiece> server_pieces(const std::vector<Variable>& parameters,
                                         const EngineOptions& options) {
  std::vector<Shape> shapes;
  for (const Variable& p : parameters) shapes.push_back(p.shape());
  const bool layerwise = options.optimizer.kind == optim::OptimizerKind::lars ||
                         options.optimizer.kind == optim::OptimizerKind::lamb;
  return partition_variables(shapes, options.parameter_server.shards,
                             options.parameter_server.min_shard_bytes, !layerwise);
}

Tensor piece_of(const Tensor& whole, const VariablePiece& piece) {
  return whole.rank() == 0 ? whole : whole.slice(piece.begin, piece.end);
}

std::vector<Variable> shard_views(const std::vector<Variable>& whole,
                                  const std::vector<VariablePiece>& pieces, int shard,
                                  std::vector<size_t>* indices) {
  std::vector<Variable> views;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const VariablePiece& piece = pieces[k];
    if (piece.shard != shard) continue;
    const Variable& w = whole[piece.variable];
    Variable view(piece_of(w.value(), piece), true);
    view.set_grad_buffer(piece_of(w.grad_buffer(), piece));
    views.push_back(view);
    if (indices) indices->push_back(k);
  }
  return views;
}

void write_shard_values(FrameWriter& out, const std::vector<VariablePiece>& pieces, int shard,
                        const std::vector<Variable>& parameters) {
  for (const VariablePiece& piece : pieces) {
    if (piece.shard == shard) out.tensor(piece_of(parameters[piece.variable].value(), piece));
  }
}

void read_shard_values(FrameReader& in, const std::vector<VariablePiece>& pieces, int shard,
                       std::vector<Variable>& parameters) {
  for (const VariablePiece& piece : pieces) {
    if (piece.shard != shard) continue;
    Tensor rows = piece_of(parameters[piece.variable].value(), piece);
    in.tensor_into(rows);
    parameters[piece.variable].mark_modified();
  }
}

void write_shard_gradients(FrameWriter& out, const std::vector<VariablePiece>& pieces, int shard,
                           const std::vector<Variable>& parameters) {
  for (const VariablePiece& piece : pieces) {
    if (piece.shard != shard) continue;
    const Variable& p = parameters[piece.variable];
    out.u64(p.has_grad() ? 1 : 0);
    if (p.has_grad()) out.tensor(piece_of(p.grad(), piece));
  }
}

void read_shard_gradients(FrameReader& in, const std::vector<VariablePiece>& pieces, int shard,
                          std::vector<Variable>& parameters) {
  for (const VariablePiece& piece : pieces) {
    if (piece.shard != shard) continue;
    Variable& p = parameters[piece.variable];
    if (in.u64() == 0) {
      p.zero_grad();
      continue;
    }
    Tensor rows = piece_of(p.grad_buffer(), piece);
    in.tensor_into(rows);
    p.define_grad();
  }
}

double shard_gradient_squares(const std::vector<VariablePiece>& pieces, int shard,
                              const std::vector<Variable>& parameters) {
  double squares = 0.0;
  for (const VariablePiece& piece : pieces) {
    const Variable& p = parameters[piece.variable];
    if (piece.shard != shard || !p.has_grad()) continue;
    squares += kernels::squared_norm(piece_of(p.grad(), piece));
  }
  return squares;
}

void write_buffers(FrameWriter& out, nn::Module& model) {
  const auto buffers = model.named_buffers();
  out.u64(buffers.size());
  for (const auto& [name, t] : buffers) out.tensor(*t);
}

void read_buffers(FrameReader& in, nn::Module& model) {
  const auto buffers = model.named_buffers();
  if (in.u64() != buffers.size()) {
    TANDEM_THROW(IoError,
                 "a parameter-server frame holds buffers for a different model (every "
                 "process must build the same one)");
  }
  for (const auto& [name, t] : buffers) in.tensor_into(*t);
}

void write_work(FrameWriter& out, const WorkOrder& order) {
  out.u64(static_cast<uint64_t>(order.step));
  out.u64(static_cast<uint64_t>(order.global_rows));
  out.u64(static_cast<uint64_t>(order.divisor));
  out.f64(order.scale);
  out.u64(static_cast<uint64_t>(order.version));
  out.u64(static_cast<uint64_t>(order.share));
}

WorkOrder read_work(FrameReader& in) {
  WorkOrder order;
  order.step = static_cast<int64_t>(in.u64());
  order.global_rows = static_cast<int64_t>(in.u64());
  order.divisor = static_cast<int64_t>(in.u64());
  order.scale = in.f64();
  order.version = static_cast<int64_t>(in.u64());
  order.share = static_cast<int64_t>(in.u64());
  if (order.divisor < 1 || order.global_rows < 1 || order.version < 0) {
    TANDEM_THROW(IoError, "work with a divisor of ", order.divisor, " over ", order.global_rows,
                 " rows at version ", order.version);
  }
  return order;
}

void write_report(FrameWriter& out, const GradientReport& report) {
  out.u64(static_cast<uint64_t>(report.rows));
  out.f64(report.loss_sum);
  out.u64(report.finite ? 1 : 0);
  out.f64(report.forward_seconds);
  out.f64(report.backward_seconds);
  out.u64(report.reports.size());
  for (double v : report.reports) out.f64(v);
  out.u64(report.shard_squares.size());
  for (double v : report.shard_squares) out.f64(v);
}

GradientReport read_report(FrameReader& in) {
  GradientReport report;
  report.rows = static_cast<int64_t>(in.u64());
  report.loss_sum = in.f64();
  report.finite = in.u64() != 0;
  report.forward_seconds = in.f64();
  report.backward_seconds = in.f64();
  const uint64_t reports = in.u64();
  if (reports > kMaxReports)
    TANDEM_THROW(IoError, "a gradient frame with ", reports, " report values");
  for (uint64_t i = 0; i < reports; ++i) report.reports.push_back(in.f64());
  const uint64_t shards = in.u64();
  if (shards > kMaxShards) TANDEM_THROW(IoError, "a gradient frame with ", shards, " shard norms");
  for (uint64_t i = 0; i < shards; ++i) report.shard_squares.push_back(in.f64());
  return report;
}

void write_update(FrameWriter& out, const ShardUpdate& update) {
  out.u64(update.advance ? 1 : 0);
  out.u64(update.step ? 1 : 0);
  write_shares(out, update.sources);
  write_shares(out, update.discards);
  out.f64(update.factor);
  out.f64(update.learning_rate);
  out.f64(update.clip_norm);
  out.u64(update.report_squares ? 1 : 0);
}

ShardUpdate read_update(FrameReader& in) {
  ShardUpdate update;
  update.advance = in.u64() != 0;
  update.step = in.u64() != 0;
  update.sources = read_shares(in);
  update.discards = read_shares(in);
  update.factor = in.f64();
  update.learning_rate = in.f64();
  update.clip_norm = in.f64();
  update.report_squares = in.u64() != 0;
  return update;
}

void write_named_tensors(FrameWriter& out,
                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  out.u64(tensors.size());
  for (const auto& [name, t] : tensors) {
    out.text(name);
    out.tensor(t);
  }
}

std::vector<std::pair<std::string, Tensor>> read_named_tensors(FrameReader& in) {
  const uint64_t n = in.u64();
  if (n > kMaxStateTensors) TANDEM_THROW(IoError, "a state of ", n, " tensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (uint64_t i = 0; i < n; ++i) {
    std::string name = in.text();
    tensors.emplace_back(std::move(name), in.tensor());
  }
  return tensors;
}

}  // namespace tandem::distribute::detail
