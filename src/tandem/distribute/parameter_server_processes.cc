#include "tandem/distribute/parameter_server_processes.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "tandem/base/error.h"
#include "tandem/base/host_name.h"
#include "tandem/base/warnings.h"
#include "tandem/comm/detail/tcp.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/detail/ps_messages.h"
#include "tandem/distribute/detail/worker_link.h"

namespace tandem::distribute {
namespace {

constexpr double kConnectSeconds = 60.0;
constexpr double kHelloSeconds = 10.0;  // from a connection to its hello

// "host\nport\naddress address ...": where this rank's peers find it.
std::string card_of(const comm::detail::TcpListener& listener) {
  std::string card = host_name() + "\n" + std::to_string(listener.port()) + "\n";
  for (const std::string& a : comm::detail::host_addresses()) card += a + " ";
  return card;
}

// Every server rank's card, rank k at index k: each broadcasts its own in
// turn (`mine` on a server rank, ignored elsewhere).
std::vector<std::string> exchange_cards(int shards, const std::string& mine) {
  const int rank = comm::mpi_world_rank();
  std::vector<std::string> cards;
  for (int k = 0; k < shards; ++k) cards.push_back(comm::mpi_broadcast(k == rank ? mine : "", k));
  return cards;
}

// A connection to the server rank `server_rank` behind `card`, introduced
// by a hello frame saying who this process is.
std::unique_ptr<detail::WorkerLink> connect_with_hello(const std::string& card, int server_rank) {
  std::istringstream in(card);
  std::string host, address;
  int port = 0;
  std::getline(in, host);
  in >> port;
  std::vector<std::string> addresses;
  // On the server's host, the loopback first.
  if (host == host_name()) addresses.emplace_back("127.0.0.1");
  while (in >> address) addresses.push_back(address);
  const std::string server = server_rank == 0
                                 ? fmt::format("the parameter server (rank 0 on host {})", host)
                                 : fmt::format("parameter-server shard {} (rank {} on host {})",
                                               server_rank, server_rank, host);
  auto link = std::make_unique<detail::WorkerLink>(
      comm::detail::connect_to(addresses, port, kConnectSeconds, "the parameter server"), server);
  detail::FrameWriter hello;
  hello.u64(static_cast<uint64_t>(comm::mpi_world_rank()));
  hello.u64(static_cast<uint64_t>(::getpid()));
  hello.text(host_name());
  link->send(detail::FrameKind::hello, {hello.bytes()});
  return link;
}

struct Hello {
  int rank = 0;
  int pid = 0;
  std::string host;
  std::unique_ptr<detail::WorkerLink> link;
};

// The next `count` connections whose hellos come from ranks in
// [first, last), each rank once.
std::vector<Hello> accept_hellos(comm::detail::TcpListener& listener, int count, int first,
                                 int last, const std::string& who) {
  std::vector<Hello> hellos;
  std::vector<bool> seen(static_cast<size_t>(last), false);
  while (static_cast<int>(hellos.size()) < count) {
    Hello h;
    h.link = std::make_unique<detail::WorkerLink>(
        listener.accept(kConnectSeconds, "parameter-server worker"), "a connecting process");
    uint64_t rank = 0;
    try {
      auto [kind, payload] = h.link->receive(kHelloSeconds);
      detail::FrameReader in(payload, "a hello");
      rank = in.u64();
      const uint64_t pid = in.u64();
      h.host = in.text();
      if (kind != detail::FrameKind::hello) TANDEM_THROW(IoError, "not a hello frame");
      // The chief may kill this pid (a silent worker on its host): never
      // -1 (every process of the user), 0 (its own group) or init.
      if (pid <= 1 || pid > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        TANDEM_THROW(IoError, "a hello with process id ", pid);
      h.pid = static_cast<int>(pid);
    } catch (const Error& e) {
      // Something else found the port: not one of ours, and not fatal.
      warn(fmt::format("{} ignored a connection that is not a tandem process of this job ({})", who,
                       e.what()));
      continue;
    }
    if (rank < static_cast<uint64_t>(first) || rank >= static_cast<uint64_t>(last) || seen[rank]) {
      TANDEM_THROW(IoError, who, " got a hello from rank ", rank, " on host ", h.host,
                   ", which is not one of ranks ", first, "..", last - 1, " or connected twice");
    }
    seen[rank] = true;
    h.rank = static_cast<int>(rank);
    hellos.push_back(std::move(h));
  }
  return hellos;
}

}  // namespace

RemoteWorkers::RemoteWorkers() = default;
RemoteWorkers::~RemoteWorkers() = default;

bool parameter_server_across_processes() {
  return comm::launched_by_mpi() && comm::launched_process_count() > 1;
}

std::shared_ptr<RemoteWorkers> accept_remote_workers(int workers, int shards,
                                                     double silence_seconds) {
  comm::detail::TcpListener listener("parameter-server workers");
  exchange_cards(shards, card_of(listener));
  auto remote = std::make_shared<RemoteWorkers>();
  remote->silence_seconds = silence_seconds;
  remote->links.resize(static_cast<size_t>(workers));
  remote->names.resize(static_cast<size_t>(workers));
  remote->pids.resize(static_cast<size_t>(workers));
  remote->on_this_host.resize(static_cast<size_t>(workers));
  remote->shard_links.resize(static_cast<size_t>(shards - 1));
  for (Hello& h :
       accept_hellos(listener, workers + shards - 1, 1, shards + workers, "the parameter server")) {
    if (h.rank < shards) {
      h.link->set_peer(fmt::format("parameter-server shard {} (rank {}, pid {} on host {})", h.rank,
                                   h.rank, h.pid, h.host));
      remote->shard_links[static_cast<size_t>(h.rank - 1)] = std::move(h.link);
      continue;
    }
    const auto r = static_cast<size_t>(h.rank - shards);
    remote->names[r] =
        fmt::format("worker {} (rank {}, pid {} on host {})", r, h.rank, h.pid, h.host);
    remote->pids[r] = h.pid;
    remote->on_this_host[r] = h.host == host_name();
    h.link->set_peer(remote->names[r]);
    remote->links[r] = std::move(h.link);
  }
  // Heartbeats to every peer: the shard ranks too hear from the chief.
  for (auto& link : remote->links) link->start_heartbeats();
  for (auto& link : remote->shard_links) link->start_heartbeats();
  return remote;
}

std::vector<std::unique_ptr<detail::WorkerLink>> connect_to_parameter_servers(int shards) {
  const std::vector<std::string> cards = exchange_cards(shards, "");
  std::vector<std::unique_ptr<detail::WorkerLink>> links;
  for (int k = 0; k < shards; ++k) {
    links.push_back(connect_with_hello(cards[static_cast<size_t>(k)], k));
    links.back()->start_heartbeats();
  }
  return links;
}

ShardRankLinks::ShardRankLinks() = default;
ShardRankLinks::~ShardRankLinks() = default;
ShardRankLinks::ShardRankLinks(ShardRankLinks&&) noexcept = default;

ShardRankLinks accept_shard_clients(int shards, int workers) {
  const int rank = comm::mpi_world_rank();
  comm::detail::TcpListener listener("parameter-server workers");
  const std::vector<std::string> cards = exchange_cards(shards, card_of(listener));
  ShardRankLinks links;
  // No heartbeats to the chief: it reads this connection only for the
  // answers it asks for (a silent shard rank is noticed by the workers).
  links.chief = connect_with_hello(cards.front(), 0);
  links.workers.resize(static_cast<size_t>(workers));
  for (Hello& h : accept_hellos(listener, workers, shards, shards + workers,
                                fmt::format("parameter-server shard {}", rank))) {
    const auto r = static_cast<size_t>(h.rank - shards);
    h.link->set_peer(
        fmt::format("worker {} (rank {}, pid {} on host {})", r, h.rank, h.pid, h.host));
    h.link->start_heartbeats();
    links.workers[r] = std::move(h.link);
  }
  return links;
}

void serve_parameter_server_work(std::vector<std::unique_ptr<detail::WorkerLink>>& servers,
                                 nn::Module& model, const ForwardFn& forward,
                                 const EngineOptions& options, const ReplicaContext& context,
                                 const std::function<std::vector<double>()>& take_reports,
                                 double silence_seconds) {
  ReplicaScope scope(context);
  std::vector<Variable> parameters = model.parameters();
  const std::vector<VariablePiece> pieces = detail::server_pieces(parameters, options);
  const int shards = static_cast<int>(servers.size());
  std::optional<precision::LossScaler> scaler;
  if (options.loss_scale) scaler.emplace(*options.loss_scale);
  model.train();
  detail::WorkerLink& chief = *servers.front();
  const std::string what = "work from " + chief.peer();
  for (int64_t received = 1;; ++received) {
    auto [kind, payload] = chief.receive(silence_seconds);
    if (kind == detail::FrameKind::stop) {
      // The server lost a worker: a bounded MPI_Finalize here too (see the engine).
      detail::FrameReader in(payload, "the server's stop");
      if (!in.done() && in.u64() != 0) comm::bound_mpi_finalize(kFinalizeSeconds);
      return;
    }
    if (kind != detail::FrameKind::work)
      TANDEM_THROW(IoError, chief.peer(), " sent frame kind ", static_cast<int>(kind));
    detail::maybe_kill_after_work(received);
    detail::FrameReader in(payload, what);
    const detail::WorkOrder order = detail::read_work(in);
    const data::Element rows = in.element();
    detail::read_shard_values(in, pieces, 0, parameters);
    detail::read_buffers(in, model);
    // The other shards' values at the version the chief handed out (or later).
    detail::FrameWriter pull;
    pull.u64(static_cast<uint64_t>(order.version));
    for (int k = 1; k < shards; ++k) servers[k]->send(detail::FrameKind::pull, {pull.bytes()});
    for (int k = 1; k < shards; ++k) {
      const std::string values =
          servers[k]->receive(detail::FrameKind::values, "values", silence_seconds);
      detail::FrameReader values_in(values, "values from " + servers[k]->peer());
      detail::read_shard_values(values_in, pieces, k, parameters);
    }
    if (scaler) scaler->restore(order.scale, 0, 0);
    const detail::WorkerGradient g = detail::compute_worker_gradient(
        model, parameters, forward, rows, order.global_rows, order.divisor, order.step, options,
        context, scaler ? &*scaler : nullptr);
    // Every shard rank holds its part before the chief hears of it.
    for (int k = 1; k < shards; ++k) {
      detail::FrameWriter push;
      push.u64(static_cast<uint64_t>(context.global_replica));
      push.u64(static_cast<uint64_t>(order.share));
      detail::write_shard_gradients(push, pieces, k, parameters);
      servers[k]->send(detail::FrameKind::push, {push.bytes()});
    }
    for (int k = 1; k < shards; ++k)
      servers[k]->receive(detail::FrameKind::ack, "an ack", silence_seconds);
    detail::GradientReport report{.rows = g.rows,
                                  .loss_sum = g.loss_sum,
                                  .finite = g.finite,
                                  .forward_seconds = g.forward_seconds,
                                  .backward_seconds = g.backward_seconds};
    if (take_reports) report.reports = take_reports();
    if (options.optimizer.global_clip_norm > 0.0 && shards > 1) {
      for (int k = 0; k < shards; ++k)
        report.shard_squares.push_back(detail::shard_gradient_squares(pieces, k, parameters));
    }
    detail::FrameWriter out;
    detail::write_report(out, report);
    detail::write_shard_gradients(out, pieces, 0, parameters);
    detail::write_buffers(out, model);
    chief.send(detail::FrameKind::gradient, {out.bytes()});
  }
}

}  // namespace tandem::distribute
