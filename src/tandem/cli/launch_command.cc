// `tandem launch`: starts a job's worker processes on this host and joins
// them with the other hosts' through a rendezvous store, like torchrun: the
// launcher of node 0 serves the store, every launcher registers its node,
// and each worker learns its rank and the store from its environment
// (comm/launch.h). A worker that fails ends the job on every node, except
// under --elastic: the job goes on without it (comm/elastic_group.h,
// train/trainer.h), and --join adds workers to a running elastic job.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <optional>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/worker_processes.h"
#include "tandem/comm/elastic_group.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/store.h"

namespace tandem::cli {
namespace {

using std::chrono::milliseconds;

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string rdzv;
  std::string run_id = "default";
  double rdzv_timeout = 300;
  bool elastic = false;
  int min_workers = 1;
  int max_workers = 0;  // 0: no bound
  bool join = false;    // add workers to a running elastic job
  std::vector<std::string> command;
};

// How long the other workers get to stop after one failed, before SIGKILL.
constexpr milliseconds kStopGrace{10'000};
constexpr milliseconds kStorePollEvery{500};
constexpr milliseconds kStoreCallTimeout{5'000};
constexpr milliseconds kDisagreementGrace{2'000};
// How long node 0 keeps serving after its job failed, for the other nodes.
constexpr milliseconds kFailureGrace{10'000};

std::atomic<int> received_signal{0};
extern "C" void on_launcher_signal(int signal) {
  received_signal.store(signal);
}

milliseconds rendezvous_timeout(const LaunchOptions& o) {
  return milliseconds(static_cast<int64_t>(o.rdzv_timeout * 1000));
}

void check_options(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nproc_per_node > 1024)
    TANDEM_THROW(InvalidArgument, "--nproc-per-node ", o.nproc_per_node, " is outside 1..1024");
  if (o.nnodes < 1 || o.nnodes > 4096)
    TANDEM_THROW(InvalidArgument, "--nnodes ", o.nnodes, " is outside 1..4096");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    TANDEM_THROW(InvalidArgument, "--node-rank ", o.node_rank, " is outside 0..", o.nnodes - 1,
                 " (--nnodes ", o.nnodes, ")");
  }
  if (o.nnodes > 1 && o.rdzv.empty()) {
    TANDEM_THROW(InvalidArgument, "--nnodes ", o.nnodes,
                 " needs --rdzv HOST:PORT, where node 0's launcher serves the rendezvous");
  }
  if (!(o.rdzv_timeout > 0 && o.rdzv_timeout <= 86'400))
    TANDEM_THROW(InvalidArgument, "--rdzv-timeout ", o.rdzv_timeout, " is outside (0, 86400] s");
  if (o.run_id.empty() || o.run_id.find_first_of("/ \t\n") != std::string::npos)
    TANDEM_THROW(InvalidArgument, "--run-id '", o.run_id,
                 "' must be non-empty, without / or spaces");
  const int workers = o.nnodes * o.nproc_per_node;
  if (!o.elastic && (o.join || o.min_workers != 1 || o.max_workers != 0)) {
    TANDEM_THROW(InvalidArgument,
                 "--join, --min-workers and --max-workers are for an elastic job (add --elastic)");
  }
  if (o.elastic && (o.min_workers < 1 || (!o.join && o.min_workers > workers))) {
    TANDEM_THROW(InvalidArgument, "--min-workers ", o.min_workers, " is outside 1..", workers,
                 " (the workers the job starts with)");
  }
  if (o.elastic && o.max_workers != 0 &&
      (o.max_workers < o.min_workers || (!o.join && o.max_workers < workers))) {
    TANDEM_THROW(InvalidArgument, "--max-workers ", o.max_workers,
                 " is below --min-workers or the workers the job starts with (", workers, ")");
  }
  if (o.join && (o.rdzv.empty() || o.nnodes != 1 || o.node_rank != 0)) {
    TANDEM_THROW(InvalidArgument,
                 "--join adds this host's workers to a running elastic job: it needs --rdzv "
                 "HOST:PORT of that job and no --nnodes or --node-rank");
  }
  if (o.command.empty()) {
    TANDEM_THROW(InvalidArgument,
                 "launch needs the command each worker runs, after -- (e.g. tandem launch "
                 "--nproc-per-node 2 -- tandem train --strategy multi-worker)");
  }
}

// The store this node meets the others at, served here on node 0.
struct Rendezvous {
  std::unique_ptr<comm::StoreServer> server;
  std::shared_ptr<comm::Store> store;
  std::string endpoint;  // for the workers: HOST:PORT
};

Rendezvous join_rendezvous(const LaunchOptions& o) {
  Rendezvous r;
  std::string host = "127.0.0.1";
  int port = 0;
  if (!o.rdzv.empty()) std::tie(host, port) = comm::parse_host_port(o.rdzv, "--rdzv");
  if (o.node_rank == 0 && !o.join) {
    r.server = std::make_unique<comm::StoreServer>(port);
    port = r.server->port();
  }
  r.endpoint = fmt::format("{}:{}", host, port);
  // Calls without a wait of their own are bounded short: a launcher cut off
  // from node 0 must notice and stop its workers.
  r.store = comm::connect_store(host, port, rendezvous_timeout(o), kStoreCallTimeout);
  if (r.server) {
    r.store->set("run_id", o.run_id);
  } else {
    const std::string served = r.store->get("run_id", rendezvous_timeout(o));
    if (served != o.run_id) {
      TANDEM_THROW(InvalidArgument, "the rendezvous at ", r.endpoint, " serves run '", served,
                   "', not '", o.run_id, "' (--run-id must be the same on every node)");
    }
  }
  return r;
}

// Registers this node and waits for the others; every node must start the
// same number of workers.
void agree_on_nodes(comm::Store& store, const LaunchOptions& o) {
  if (store.add(fmt::format("node/{}", o.node_rank), 1) != 1) {
    TANDEM_THROW(InvalidArgument, "another launcher already joined run '", o.run_id,
                 "' as --node-rank ", o.node_rank);
  }
  store.set(fmt::format("nproc/{}", o.node_rank), std::to_string(o.nproc_per_node));
  const auto deadline = std::chrono::steady_clock::now() + rendezvous_timeout(o);
  for (int node = 0; node < o.nnodes; ++node) {
    const auto left = std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                                    deadline - std::chrono::steady_clock::now()));
    std::string nproc;
    try {
      nproc = store.get(fmt::format("nproc/{}", node), left);
    } catch (const Timeout&) {
      TANDEM_THROW(Timeout, "node ", node, " of ", o.nnodes, " did not join run '", o.run_id,
                   "' within ", o.rdzv_timeout, " s (--rdzv-timeout)");
    }
    if (nproc != std::to_string(o.nproc_per_node)) {
      TANDEM_THROW(InvalidArgument, "node ", node, " starts ", nproc, " workers and this node (",
                   o.node_rank, ") ", o.nproc_per_node,
                   ": every node must give the same --nproc-per-node");
    }
  }
}

// A joiner's rank and world size are its launcher's own: its place in the
// job comes from the membership it is taken into.
std::vector<std::string> worker_environment(const LaunchOptions& o, const std::string& endpoint,
                                            int local_rank) {
  std::vector<std::string> environment = {
      fmt::format("{}={}", comm::kRankVariable, o.node_rank * o.nproc_per_node + local_rank),
      fmt::format("{}={}", comm::kWorldSizeVariable, o.nnodes * o.nproc_per_node),
      fmt::format("{}={}", comm::kLocalRankVariable, local_rank),
      fmt::format("{}={}", comm::kLocalWorldSizeVariable, o.nproc_per_node),
      fmt::format("{}={}", comm::kRendezvousVariable, endpoint),
      fmt::format("{}={}", comm::kRunIdVariable, o.run_id)};
  if (o.elastic) {
    environment.push_back(
        fmt::format("{}={}", comm::kElasticVariable, o.join ? "joiner" : "member"));
    environment.push_back(fmt::format("{}={}", comm::kMinWorkersVariable, o.min_workers));
    if (o.max_workers > 0)
      environment.push_back(fmt::format("{}={}", comm::kMaxWorkersVariable, o.max_workers));
  }
  return environment;
}

// `tandem` as the command is this very program (so a build tree's tandem
// launches itself, not another one on PATH).
std::vector<std::string> resolve_command(std::vector<std::string> command) {
  if (command.front() == "tandem") {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) command.front().assign(self, static_cast<size_t>(n));
  }
  return command;
}

// Under --elastic: whether the job goes on without a worker that failed
// (it has formed; before, the others would wait for the worker to
// connect); if so the worker is named and marked lost for the others.
bool goes_on_without(const WorkerExit& exit, const std::string& failure, comm::Store& store,
                     const LaunchOptions& o, const std::string& endpoint) {
  if (!o.elastic) return false;
  if (!o.join) {
    try {
      if (!comm::ElasticGroup::formed(store, o.run_id, o.nnodes * o.nproc_per_node)) return false;
    } catch (const Error&) {
      return false;  // the store is lost: the job ends
    }
  }
  fmt::print(stderr, "tandem launch: {}; the elastic job goes on without it\n", failure);
  // Telling the others spares them waiting for its heartbeat to go still.
  // A joiner's member id is its own, not known here: they notice its silence.
  if (!o.join) {
    try {
      const auto [host, port] = comm::parse_host_port(endpoint, "--rdzv");
      comm::ElasticGroup::mark_lost(host, port, o.run_id, exit.rank, failure);
    } catch (const Error&) {
      // The store is lost: the workers notice that themselves.
    }
  }
  return true;
}

// Under --elastic, once a worker has finished the job: whether every worker
// still running here was given up by the others (stopped, or cut off), so
// that it would wait for them for ever. A joiner's are not known here.
bool only_given_up_left(const WorkerProcesses& workers, comm::Store& store,
                        const LaunchOptions& o) {
  if (o.join) return true;
  try {
    for (int rank : workers.running_ranks()) {
      if (!store.try_get(fmt::format("{}/elastic/lost/{}", o.run_id, rank))) return false;
    }
  } catch (const Error&) {
    // The store is gone with the job.
  }
  return true;
}

// Why the job is failing, as the store tells it: another node's failure,
// or the store itself lost; nothing while all is well.
std::optional<std::string> job_failure(comm::Store& store) {
  try {
    // (An elastic job's workers set "failed" only before the job formed.)
    return store.try_get("failed");
  } catch (const Error& e) {
    return fmt::format("the rendezvous store is lost ({})", e.what());
  }
}

// Watches the workers until all have ended, one has failed, or another
// node reports a failure; returns the launcher's exit status.
int supervise(WorkerProcesses& workers, comm::Store& store, const LaunchOptions& o,
              const std::string& endpoint) {
  auto next_poll = std::chrono::steady_clock::now();
  int forwarded = 0;  // the signal passed on to the workers, if any
  int status = 0;
  int finished = 0;  // elastic: workers that ended well
  std::optional<std::chrono::steady_clock::time_point> first_finished;
  while (workers.running() > 0) {
    if (o.elastic && first_finished &&
        std::chrono::steady_clock::now() - *first_finished > kStopGrace &&
        only_given_up_left(workers, store, o)) {
      fmt::print(stderr,
                 "tandem launch: the elastic job finished {} s ago; stopping {} worker(s) the "
                 "others gave up\n",
                 kStopGrace.count() / 1000, workers.running());
      workers.stop_all(kStopGrace);
      break;
    }
    if (const int s = received_signal.exchange(0)) {
      workers.signal_all(s);
      forwarded = s;
    }
    if (const auto exit = workers.poll()) {
      if (exit->status == 0) {
        ++finished;
        if (!first_finished) first_finished = std::chrono::steady_clock::now();
        continue;
      }
      // Stopped by the signal passed on: the others are stopping too (the
      // chief may be writing its checkpoint; a second signal would abort it).
      if (forwarded != 0 && exit->status == 128 + forwarded) {
        status = exit->status;
        continue;
      }
      std::string failure = fmt::format("worker rank {} (pid {}) on node {} {}", exit->rank,
                                        exit->pid, o.node_rank, exit->description);
      if (goes_on_without(*exit, failure, store, o, endpoint)) {
        status = exit->status;
        continue;
      }
      // A lost store (or another node's failure) is often why the worker
      // ended (its peers on the lost node were stopped with their
      // launcher): say so rather than leave only the worker's status.
      if (const auto why = job_failure(store)) failure += fmt::format(" after {}", *why);
      fmt::print(stderr, "tandem launch: {}; stopping the job\n", failure);
      try {
        store.set("failed", failure);
      } catch (const Error&) {
        // The other nodes then lose the store and stop too.
      }
      workers.stop_all(kStopGrace);
      return exit->status;
    }
    if (std::chrono::steady_clock::now() >= next_poll) {
      next_poll += kStorePollEvery;
      if (const std::optional<std::string> failed = job_failure(store)) {
        fmt::print(stderr, "tandem launch: stopping node {}'s workers: {}\n", o.node_rank, *failed);
        workers.stop_all(kStopGrace);
        return 1;
      }
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  // An elastic job that went on without some workers succeeded when the
  // others finished it.
  if (o.elastic && finished > 0 && forwarded == 0) return 0;
  return status;
}

// Node 0 serves the store until every node is done with it.
// After a failure, only long enough for the others to read it (they look
// every kStorePollEvery): a node cut off would never report.
void finish(comm::Store& store, const LaunchOptions& o, int status) {
  if (o.join) return;  // node 0 does not wait for a joining host
  if (o.node_rank != 0) {
    try {
      store.set(fmt::format("done/{}", o.node_rank), std::to_string(status));
    } catch (const Error&) {
      // Node 0 may close the store as soon as it has read this; if the set
      // did not arrive, node 0 is gone and waits for nothing.
    }
    return;
  }
  try {
    // An elastic job may have finished without a node that was cut off.
    const bool others_may_be_gone = status != 0 || o.elastic;
    const auto deadline = std::chrono::steady_clock::now() +
                          (others_may_be_gone ? kFailureGrace : rendezvous_timeout(o));
    for (int node = 1; node < o.nnodes; ++node) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      store.get(fmt::format("done/{}", node), std::max(left, milliseconds(1)));
    }
  } catch (const Error& e) {
    fmt::print(stderr, "tandem launch: warning: not every node reported its end: {}\n", e.what());
  }
}

int run_launch(const LaunchOptions& o) {
  check_options(o);
  const std::vector<std::string> command = resolve_command(o.command);
  Rendezvous rendezvous = join_rendezvous(o);
  try {
    if (!o.join) agree_on_nodes(*rendezvous.store, o);
  } catch (const Error&) {
    // The nodes disagree: node 0 keeps serving a moment, so that the others
    // read what they disagree on rather than a store that vanished.
    if (rendezvous.server) std::this_thread::sleep_for(kDisagreementGrace);
    throw;
  }
  std::signal(SIGINT, on_launcher_signal);
  std::signal(SIGTERM, on_launcher_signal);
  WorkerProcesses workers;
  for (int local = 0; local < o.nproc_per_node; ++local)
    workers.start(o.node_rank * o.nproc_per_node + local, command,
                  worker_environment(o, rendezvous.endpoint, local));
  const int status = supervise(workers, *rendezvous.store, o, rendezvous.endpoint);
  finish(*rendezvous.store, o, status);
  return status;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "launch",
      "Start a job's worker processes on this host and join them with other hosts' "
      "(tandem launch --nproc-per-node 2 -- tandem train --strategy multi-worker ...)");
  auto o = std::make_shared<LaunchOptions>();
  command
      ->add_option("--nproc-per-node", o->nproc_per_node, "Worker processes to start on this host")
      ->capture_default_str();
  command->add_option("--nnodes", o->nnodes, "Hosts in the job, each running tandem launch")
      ->capture_default_str();
  command
      ->add_option("--node-rank", o->node_rank,
                   "This host's index, 0..nnodes-1 (node 0 serves the rendezvous)")
      ->capture_default_str();
  command->add_option("--rdzv", o->rdzv,
                      "HOST:PORT of the rendezvous, served by node 0's launcher (default: a "
                      "free port on this host, for a one-host job)");
  command
      ->add_option("--run-id", o->run_id,
                   "The job's name, the same on every node (a launcher or worker of another "
                   "run is refused)")
      ->capture_default_str();
  command
      ->add_option("--rdzv-timeout", o->rdzv_timeout,
                   "Seconds to wait for the other nodes and the rendezvous")
      ->capture_default_str();
  command->add_flag("--elastic", o->elastic,
                    "Elastic training: a worker that is lost (ends, is killed, falls silent past "
                    "tandem train's --peer-timeout) leaves the job, which goes on with the others; "
                    "workers may join (--join)");
  command
      ->add_option("--min-workers", o->min_workers, "Elastic: fewer workers than this end the job")
      ->capture_default_str();
  command
      ->add_option("--max-workers", o->max_workers,
                   "Elastic: joiners beyond this many workers wait (0: no bound)")
      ->capture_default_str();
  command->add_flag("--join", o->join,
                    "Elastic: add this host's workers to the running job at --rdzv (they are "
                    "taken in at the next step)");
  command->add_option("command", o->command,
                      "The command each worker runs, after -- ('tandem' is this tandem)");
  return {command, [o]() { return run_launch(*o); }};
}

}  // namespace tandem::cli
