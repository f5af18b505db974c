// make_strategy's checks: one device refuses more threads than physical cores
// as mirrored refuses more devices x threads, with the same escape hatch.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <string>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/distribute/strategy.h"

namespace tandem {
namespace {

std::string error_of(const distribute::StrategyConfig& config) {
  try {
    distribute::make_strategy(config);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(Strategy, NamesRoundTripAndTheFlagsSpellingsParse) {
  using distribute::StrategyKind;
  for (StrategyKind k : {StrategyKind::one_device, StrategyKind::mirrored,
                         StrategyKind::multi_worker, StrategyKind::parameter_server})
    EXPECT_EQ(distribute::parse_strategy(distribute::strategy_name(k)), k);
  EXPECT_EQ(distribute::parse_strategy("one-device"), StrategyKind::one_device);
  EXPECT_EQ(distribute::parse_strategy("parameter-server"), StrategyKind::parameter_server);
  try {
    distribute::parse_strategy("sideways");
    FAIL() << "parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown strategy 'sideways' (expected one_device, mirrored, multi_worker or "
                 "parameter_server)");
  }
  EXPECT_EQ(distribute::make_strategy({.kind = StrategyKind::mirrored, .devices = 1})->name(),
            "mirrored");
  // A value outside the enum (a corrupt cast) is refused, not run as some strategy.
  EXPECT_THROW(distribute::strategy_layout({.kind = static_cast<StrategyKind>(9)}),
               InvalidArgument);
}

// The default memory limit shares the host among every process's replicas
// here: two processes of one replica each got the whole memory each.
TEST(Strategy, HostReplicasCountEveryProcessOnTheHost) {
  EXPECT_EQ(distribute::strategy_layout({.kind = distribute::StrategyKind::mirrored,
                                         .devices = 2,
                                         .allow_oversubscription = true})
                .host_replicas,
            2);
  struct LaunchedByMpi {
    explicit LaunchedByMpi(int rank) {
      ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
      ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
      ::setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
    }
    ~LaunchedByMpi() {
      for (const char* v :
           {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_RANK"})
        ::unsetenv(v);
    }
  };
  for (int rank : {0, 1}) {
    LaunchedByMpi launched(rank);
    const distribute::StrategyLayout workers =
        distribute::strategy_layout({.kind = distribute::StrategyKind::multi_worker,
                                     .devices = 1,
                                     .allow_oversubscription = true});
    EXPECT_EQ(workers.local_replicas, 1);
    EXPECT_EQ(workers.host_replicas, 3);
    // Rank 0 serves and holds stand-ins for the 2 workers: 3 processes share
    // the host, whichever rank asks.
    const distribute::StrategyLayout ps =
        distribute::strategy_layout({.kind = distribute::StrategyKind::parameter_server,
                                     .allow_oversubscription = true,
                                     .ps_shards = 1});
    EXPECT_EQ(ps.global_replicas, 2);
    EXPECT_EQ(ps.local_replicas, rank == 0 ? 2 : 1);
    EXPECT_EQ(ps.host_replicas, 3) << "rank " << rank;
  }
}

TEST(Strategy, OneDeviceRefusesMoreThreadsThanCoresLikeMirrored) {
  const int cores = std::max(1, cpu_info().physical_cores);
  const std::string one =
      error_of({.kind = distribute::StrategyKind::one_device, .threads_per_device = cores + 1});
  EXPECT_EQ(one, "1 device(s) x " + std::to_string(cores + 1) + " thread(s) need " +
                     std::to_string(cores + 1) + " cores but this machine has " +
                     std::to_string(cores) +
                     " physical cores (threads would slow each other down; to do it anyway, set "
                     "allow_oversubscription: --allow-oversubscription on the command line, "
                     "fit(allow_oversubscription=True) in Python)");
  const std::string mirrored = error_of(
      {.kind = distribute::StrategyKind::mirrored, .devices = 1, .threads_per_device = cores + 1});
  EXPECT_EQ(mirrored, one);  // the same rule and the same words
  for (const char* name : {"one_device", "mirrored"}) {
    auto s = distribute::make_strategy({.kind = distribute::parse_strategy(name),
                                        .devices = 1,
                                        .threads_per_device = cores + 1,
                                        .allow_oversubscription = true});
    EXPECT_EQ(s->threads_per_replica(), cores + 1) << name;
  }
  // As many threads as cores, and the default (one per core), are fine.
  EXPECT_EQ(error_of({.kind = distribute::StrategyKind::one_device, .threads_per_device = cores}),
            "no error");
  EXPECT_EQ(distribute::make_strategy({.kind = distribute::StrategyKind::one_device})
                ->threads_per_replica(),
            cores);
}

TEST(Strategy, OneDeviceRunsOneReplicaAndCountsAreNotNegative) {
  EXPECT_NE(error_of({.kind = distribute::StrategyKind::one_device, .devices = 2})
                .find("runs one replica"),
            std::string::npos);
  EXPECT_NE(error_of({.kind = distribute::StrategyKind::mirrored, .devices = -1})
                .find("must be positive"),
            std::string::npos);
  EXPECT_NE(error_of({.kind = distribute::StrategyKind::one_device, .threads_per_device = -1})
                .find("must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem
