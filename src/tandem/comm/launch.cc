#include "tandem/comm/launch.h"

#include <cstdlib>
#include <mutex>

#include "tandem/base/environment.h"
#include "tandem/base/error.h"
#include "tandem/comm/gloo.h"
#include "tandem/comm/mpi.h"
#include "tandem/comm/store.h"

namespace tandem::comm {
namespace {

// The launch's store, connected once per process, and how many
// communicators this process has made over it (each one's prefix).
struct LaunchStore {
  std::mutex mutex;
  std::shared_ptr<Store> store;
  int communicators = 0;
};

LaunchStore& launch_store() {
  static LaunchStore s;
  return s;
}

// The launch's store, checked to serve this worker's run.
std::shared_ptr<Store> connect_launch_store(const char* endpoint, const char* run_id,
                                            std::chrono::milliseconds timeout) {
  const auto [host, port] = parse_host_port(endpoint, kRendezvousVariable);
  std::shared_ptr<Store> store = connect_store(host, port, timeout);
  const std::string served = store->get("run_id", timeout);
  if (served != run_id) {
    TANDEM_THROW(InvalidArgument, "the rendezvous store at ", endpoint, " serves run '", served,
                 "', not this worker's run '", run_id,
                 "' (a worker of another job, or two jobs on one port?)");
  }
  return store;
}

std::unique_ptr<Communicator> make_launched_gloo_communicator(CommOptions options) {
  const char* endpoint = std::getenv(kRendezvousVariable);
  const char* run_id = std::getenv(kRunIdVariable);
  const int rank = launched_rank(), size = launched_process_count();
  if (endpoint == nullptr || run_id == nullptr || rank < 0 || size < 1 || rank >= size) {
    TANDEM_THROW(InvalidArgument, "this process's tandem launch environment is incomplete (",
                 kRendezvousVariable, ", ", kRunIdVariable, ", ", kRankVariable, " and ",
                 kWorldSizeVariable, " are needed); start it with tandem launch");
  }
  LaunchStore& s = launch_store();
  std::lock_guard lock(s.mutex);
  if (!s.store) s.store = connect_launch_store(endpoint, run_id, options.timeout);
  const std::string prefix = std::string(run_id) + "/comm" + std::to_string(s.communicators++);
  return make_gloo_communicator(s.store, prefix, rank, size, options);
}

}  // namespace

std::string_view launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::mpi:
      return "mpirun";
    case Launcher::tandem:
      return "tandem launch";
    case Launcher::none:
      break;
  }
  return "none";
}

bool launched_by_mpi() {
  for (const char* variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

Launcher launcher() {
  if (launched_by_mpi()) return Launcher::mpi;
  if (std::getenv(kWorldSizeVariable) != nullptr) return Launcher::tandem;
  return Launcher::none;
}

int launched_process_count() {
  switch (launcher()) {
    case Launcher::mpi:
      return environment_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
    case Launcher::tandem:
      return environment_number({kWorldSizeVariable}, 1);
    case Launcher::none:
      break;
  }
  return 0;
}

int launched_rank() {
  switch (launcher()) {
    case Launcher::mpi:
      return environment_number({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
    case Launcher::tandem:
      return environment_number({kRankVariable}, 0);
    case Launcher::none:
      break;
  }
  return -1;
}

int launched_local_size() {
  const int n = launcher() == Launcher::tandem
                    ? environment_number({kLocalWorldSizeVariable}, 1)
                    : environment_number({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
  return n > 0 ? n : 1;
}

int launched_local_rank() {
  const int r = launcher() == Launcher::tandem
                    ? environment_number({kLocalRankVariable}, 0)
                    : environment_number({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
  return r >= 0 ? r : 0;
}

std::unique_ptr<Communicator> make_process_communicator(CommOptions options) {
  switch (launcher()) {
    case Launcher::mpi:
      return make_mpi_communicator(options);
    case Launcher::tandem:
      return make_launched_gloo_communicator(options);
    case Launcher::none:
      break;
  }
  TANDEM_THROW(InvalidArgument,
               "this process was not started by mpirun or tandem launch, so it has no job to "
               "communicate with");
}

}  // namespace tandem::comm

namespace tandem::comm {

bool launched_elastic() {
  return launcher() == Launcher::tandem && std::getenv(kElasticVariable) != nullptr;
}

std::unique_ptr<ElasticGroup> join_elastic_job(ElasticOptions options) {
  const char* role = std::getenv(kElasticVariable);
  const char* endpoint = std::getenv(kRendezvousVariable);
  const char* run_id = std::getenv(kRunIdVariable);
  if (launcher() != Launcher::tandem || role == nullptr || endpoint == nullptr ||
      run_id == nullptr) {
    TANDEM_THROW(InvalidArgument,
                 "elastic training needs its workers started by tandem launch --elastic");
  }
  const std::string_view kind = role;
  if (kind != "member" && kind != "joiner") {
    TANDEM_THROW(InvalidArgument, kElasticVariable, "='", kind,
                 "' is neither member nor joiner (start workers with tandem launch --elastic)");
  }
  if (const int least = environment_number({kMinWorkersVariable}, 1); least > 0)
    options.min_members = least;
  if (const int most = environment_number({kMaxWorkersVariable}, 1); most > 0)
    options.max_members = most;
  connect_launch_store(endpoint, run_id, options.comm.timeout);  // refuses another run's store
  const auto [host, port] = parse_host_port(endpoint, kRendezvousVariable);
  if (kind == "joiner") return ElasticGroup::join(host, port, run_id, options);
  const int rank = launched_rank(), size = launched_process_count();
  if (rank < 0 || size < 1 || rank >= size) {
    TANDEM_THROW(InvalidArgument, "this process's tandem launch environment has rank ", rank,
                 " of ", size, " processes");
  }
  return ElasticGroup::start(host, port, run_id, rank, size, options);
}

}  // namespace tandem::comm
