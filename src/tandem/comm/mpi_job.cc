// The job-level MPI calls of mpi.h (world rank and size, set-up messages,
// how the process leaves MPI at exit), apart from the communicator (mpi.cc).
#include "tandem/comm/mpi.h"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "tandem/base/error.h"
#include "tandem/comm/launch.h"
#include "tandem/config.h"

#if TANDEM_HAVE_MPI
#include "tandem/comm/detail/mpi_runtime.h"
#endif

namespace tandem::comm {

std::vector<MpiSetting> recommended_mpi_settings() {
  return {{"OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1"},
          {"OMPI_MCA_mpi_yield_when_idle", "1"}};
}

std::vector<std::string> apply_recommended_mpi_settings() {
  std::vector<std::string> set;
  for (const MpiSetting& s : recommended_mpi_settings()) {
    if (std::getenv(s.variable.c_str()) != nullptr) continue;
    if (setenv(s.variable.c_str(), s.value.c_str(), /*overwrite=*/0) != 0) {
      TANDEM_THROW(Error, "cannot set ", s.variable, " in the environment");
    }
    set.push_back(s.variable);
  }
  return set;
}

#if !TANDEM_HAVE_MPI

int mpi_world_rank() {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
int mpi_world_size() {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
std::string mpi_launch_advice() {
  return {};
}
std::string mpi_broadcast(std::string, int) {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
void mpi_send_message(int, const std::string&) {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
std::optional<std::pair<int, std::string>> mpi_poll_message() {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
void bound_mpi_finalize(double) {}
void end_mpi_job_at_exit() {}
void abort_mpi_job(int) {}

#else

using detail::abort_at_exit;
using detail::advice_mutex;
using detail::check_mpi;
using detail::finalize_limit_seconds;
using detail::job_broken;
using detail::launch_advice;
using detail::runtime;

int mpi_world_rank() {
  runtime();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  runtime();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void bound_mpi_finalize(double seconds) {
  finalize_limit_seconds.store(seconds);
}

void end_mpi_job_at_exit() {
  abort_at_exit.store(true);
}

std::string mpi_broadcast(std::string bytes, int root) {
  runtime();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Small texts (addresses): the length first, then the bytes.
  int64_t length = static_cast<int64_t>(bytes.size());
  MPI_Bcast(&length, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
  if (length < 0 || length > (int64_t{1} << 20))
    TANDEM_THROW(CommError, "mpi_broadcast: ", length, " bytes (at most 1 MiB)");
  if (rank != root) bytes.assign(static_cast<size_t>(length), '\0');
  MPI_Bcast(bytes.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD);
  return bytes;
}

// Apart from every collective's tag space: the collectives run on
// duplicates of the world communicator, and the broadcasts above carry none.
constexpr int kMessageTag = 7301;
constexpr int kMaxMessageBytes = 1 << 20;

void mpi_send_message(int to, const std::string& bytes) {
  runtime();
  if (bytes.size() > static_cast<size_t>(kMaxMessageBytes))
    TANDEM_THROW(CommError, "mpi_send_message: ", bytes.size(), " bytes (at most 1 MiB)");
  check_mpi(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_CHAR, to, kMessageTag,
                     MPI_COMM_WORLD),
            "MPI_Send");
}

std::optional<std::pair<int, std::string>> mpi_poll_message() {
  runtime();
  int arrived = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kMessageTag, MPI_COMM_WORLD, &arrived, &status),
            "MPI_Iprobe");
  if (!arrived) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  if (count < 0 || count > kMaxMessageBytes)
    TANDEM_THROW(CommError, "a message of ", count, " bytes from rank ", status.MPI_SOURCE);
  std::string bytes(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Recv(bytes.data(), count, MPI_CHAR, status.MPI_SOURCE, kMessageTag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
  return std::pair(status.MPI_SOURCE, std::move(bytes));
}

std::string mpi_launch_advice() {
  std::lock_guard<std::mutex> lock(advice_mutex);
  return launch_advice;
}

void abort_mpi_job(int status) {
  if (!launched_by_mpi()) return;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized && !finalized && launched_process_count() > 1) {
    // Failed before MPI was needed (a flag, a file, a layout): the ranks
    // that got further wait in MPI_Init's exchange for this one, and
    // mpirun --enable-recovery would not end the job for its exit. Joining
    // MPI to abort it ends every rank.
    try {
      runtime();
      initialized = 1;
    } catch (const Error&) {
      return;
    }
  }
  if (!initialized || finalized) return;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return;
  job_broken.store(true);
  MPI_Abort(MPI_COMM_WORLD, status);
}

#endif

}  // namespace tandem::comm
