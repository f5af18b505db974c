#include "tandem/distribute/parameter_server_processes.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "tandem/base/error.h"
#include "tandem/comm/mpi.h"
#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/detail/worker_link.h"

namespace tandem::distribute {
namespace {

constexpr double kConnectSeconds = 60.0;
constexpr double kHelloSeconds = 10.0;  // from a connection to its hello

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

RemoteWorkers::RemoteWorkers() = default;
RemoteWorkers::~RemoteWorkers() = default;

bool parameter_server_across_processes() {
  return comm::launched_by_mpi() && comm::launched_process_count() > 1;
}

std::shared_ptr<RemoteWorkers> accept_remote_workers(int workers, double silence_seconds) {
  detail::WorkerListener listener;
  // "host\nport\naddress address ...": where the workers find this process.
  std::string card = host_name() + "\n" + std::to_string(listener.port()) + "\n";
  for (const std::string& a : detail::host_addresses()) card += a + " ";
  comm::mpi_broadcast(card, 0);
  auto remote = std::make_shared<RemoteWorkers>();
  remote->silence_seconds = silence_seconds;
  remote->links.resize(static_cast<size_t>(workers));
  remote->names.resize(static_cast<size_t>(workers));
  remote->pids.resize(static_cast<size_t>(workers));
  remote->on_this_host.resize(static_cast<size_t>(workers));
  for (int connected = 0; connected < workers;) {
    auto link = std::make_unique<detail::WorkerLink>(listener.accept(kConnectSeconds),
                                                     "a connecting worker");
    uint64_t rank = 0, pid = 0;
    std::string host;
    try {
      auto [kind, payload] = link->receive(kHelloSeconds);
      detail::FrameReader in(payload, "a worker's hello");
      rank = in.u64();
      pid = in.u64();
      host = in.text();
      if (kind != detail::FrameKind::hello) TANDEM_THROW(IoError, "not a hello frame");
    } catch (const Error& e) {
      // Something else found the port: not one of ours, and not fatal.
      fmt::print(stderr, "tandem: warning: the parameter server ignored a connection that is "
                 "not a tandem worker ({})\n", e.what());
      continue;
    }
    if (rank < 1 || rank > static_cast<uint64_t>(workers) || remote->links[rank - 1]) {
      TANDEM_THROW(IoError, "the parameter server got a hello from rank ", rank, " on host ", host,
                   ", which is not one of its ", workers, " workers or connected twice");
    }
    const size_t r = rank - 1;
    remote->names[r] = fmt::format("worker {} (rank {}, pid {} on host {})", r, rank, pid, host);
    remote->pids[r] = static_cast<int>(pid);
    remote->on_this_host[r] = host == host_name();
    link->set_peer(remote->names[r]);
    remote->links[r] = std::move(link);
    ++connected;
  }
  for (auto& link : remote->links) link->start_heartbeats();
  return remote;
}

std::unique_ptr<detail::WorkerLink> connect_to_parameter_server() {
  const int rank = comm::mpi_world_rank();
  std::istringstream card(comm::mpi_broadcast({}, 0));
  std::string host, address;
  int port = 0;
  std::getline(card, host);
  card >> port;
  std::vector<std::string> addresses;
  // On the server's host, the loopback first.
  if (host == host_name()) addresses.emplace_back("127.0.0.1");
  while (card >> address) addresses.push_back(address);
  const std::string server = fmt::format("the parameter server (rank 0 on host {})", host);
  auto link = std::make_unique<detail::WorkerLink>(
      detail::connect_to(addresses, port, kConnectSeconds), server);
  detail::FrameWriter hello;
  hello.u64(static_cast<uint64_t>(rank));
  hello.u64(static_cast<uint64_t>(::getpid()));
  hello.text(host_name());
  link->send(detail::FrameKind::hello, {hello.bytes()});
  link->start_heartbeats();
  return link;
}

void serve_parameter_server_work(detail::WorkerLink& link, nn::Module& model,
                                 const ForwardFn& forward, const EngineOptions& options,
                                 const ReplicaContext& context,
                                 const std::function<std::vector<double>()>& take_reports,
                                 double silence_seconds) {
  ReplicaScope scope(context);
  std::vector<Variable> parameters = model.parameters();
  std::optional<precision::LossScaler> scaler;
  if (options.loss_scale) scaler.emplace(*options.loss_scale);
  model.train();
  const std::string what = "work from " + link.peer();
  for (int64_t received = 1;; ++received) {
    auto [kind, payload] = link.receive(silence_seconds);
    if (kind == detail::FrameKind::stop) {
      // The server lost a worker: a bounded MPI_Finalize here too (see the engine).
      detail::FrameReader in(payload, "the server's stop");
      if (!in.done() && in.u64() != 0) comm::bound_mpi_finalize(kFinalizeSeconds);
      return;
    }
    if (kind != detail::FrameKind::work)
      TANDEM_THROW(IoError, link.peer(), " sent frame kind ", static_cast<int>(kind));
    detail::maybe_kill_after_work(received);
    detail::FrameReader in(payload, what);
    const auto step = static_cast<int64_t>(in.u64());
    const auto global_rows = static_cast<int64_t>(in.u64());
    const auto divisor = static_cast<int64_t>(in.u64());
    const double scale = in.f64();
    const data::Element rows = in.element();
    if (in.u64() != parameters.size()) {
      TANDEM_THROW(IoError, what, ": parameters for a different model (every process must "
                   "build the same one)");
    }
    for (Variable& p : parameters) {
      Tensor value = p.value();
      in.tensor_into(value);
      p.mark_modified();
    }
    detail::read_buffers(in, model);
    if (divisor < 1 || global_rows < 1) TANDEM_THROW(IoError, what, ": a divisor of ", divisor);
    if (scaler) scaler->restore(scale, 0, 0);
    const detail::WorkerGradient g = detail::compute_worker_gradient(
        model, parameters, forward, rows, global_rows, divisor, step, options, context,
        scaler ? &*scaler : nullptr);
    detail::FrameWriter out;
    out.u64(static_cast<uint64_t>(g.rows));
    out.f64(g.loss_sum);
    out.u64(g.finite ? 1 : 0);
    out.f64(g.forward_seconds);
    out.f64(g.backward_seconds);
    const std::vector<double> reports = take_reports ? take_reports() : std::vector<double>{};
    out.u64(reports.size());
    for (double v : reports) out.f64(v);
    out.u64(parameters.size());
    for (const Variable& p : parameters) {
      out.u64(p.has_grad() ? 1 : 0);
      if (p.has_grad()) out.tensor(p.grad());
    }
    detail::write_buffers(out, model);
    link.send(detail::FrameKind::gradient, {out.bytes()});
  }
}

}  // namespace tandem::distribute
