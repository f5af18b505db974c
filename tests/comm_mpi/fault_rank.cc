// Fault tests under mpirun: one rank of a multi-worker training on the step
// engine fails in a given way; every other rank must end with an error that
// names it, within seconds, and no process may be left behind (the CTest
// script checks both). The failure, from argv[1]:
//   start   rank 0 throws after building the strategy, before any collective
//           of the engine (the others wait in the engine's set-up).
//   throw   the last rank's forward throws at step 5 (inside its replica
//           thread; the others wait in the gradient all-reduce).
//   stop    the last rank stops itself (SIGSTOP) at step 5; the others' next
//           collective times out after 3 s with a stall report naming it.
//   freeze  as stop, but with the default 300 s collective timeout: the
//           others give the silent rank up after the 3 s peer timeout,
//           naming its host.
//   slow    the last rank computes for 6 s at step 5 (twice the peer
//           timeout) and the run of 20 steps must complete: a busy rank
//           still answers, so it is never given up.
// argv[2]: replicas per process (default 1).
// The end is the CLI's: the error on stderr with the rank, then MPI_Abort.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/tandem.h"

using namespace tandem;

namespace {

data::Element batch(int64_t rows) {
  return {{"x", Tensor::full(Shape{rows, 4}, 0.5f)}, {"y", Tensor::full(Shape{rows, 1}, 1.0f)}};
}

int fail(const char* message) {
  std::fprintf(stderr, "fault_rank: error on rank %d: %s\n", comm::launched_rank(), message);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  comm::abort_mpi_job(1);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int devices = argc > 2 ? std::atoi(argv[2]) : 1;
  if (mode != "start" && mode != "throw" && mode != "stop" && mode != "freeze" && mode != "slow") {
    std::fprintf(stderr, "usage: fault_rank start|throw|stop|freeze|slow [replicas per process]\n");
    return 2;
  }
  tandem::comm::apply_recommended_mpi_settings();
  const bool peer_timeout_case = mode == "freeze" || mode == "slow";
  try {
    auto strategy = distribute::make_strategy(
        {.kind = distribute::StrategyKind::multi_worker,
         .devices = devices,
         .threads_per_device = 1,
         .allow_oversubscription = true,
         .comm = {.timeout = std::chrono::seconds(peer_timeout_case ? 300 : 3),
                  .peer_timeout = std::chrono::seconds(3)}});
    const int rank = strategy->first_replica() / strategy->local_replicas();
    const int last = strategy->global_replicas() / strategy->local_replicas() - 1;
    if (mode == "start" && rank == 0) throw Error("injected failure before the first collective");
    auto engine = strategy->make_engine(
        [] {
          Generator g(3);
          return std::make_shared<nn::Linear>(4, 1, nn::LinearOptions{}, g);
        },
        {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1}});
    int64_t step = 0;
    const distribute::ForwardFn forward = [&](nn::Module& model,
                                              const distribute::ReplicaBatch& b) {
      if (step == 5 && rank == last && b.context.local_replica == 0) {
        if (mode == "throw") throw Error("injected failure in the forward pass");
        if (mode == "stop" || mode == "freeze") std::raise(SIGSTOP);
        if (mode == "slow") std::this_thread::sleep_for(std::chrono::seconds(6));
      }
      const Variable error =
          add(model.forward(Variable(b.rows.at("x"))), scale(Variable(b.rows.at("y")), -1.0f));
      return reshape(mul(error, error), Shape{b.rows.at("x").shape()[0]});
    };
    for (const int64_t steps = mode == "slow" ? 20 : 1000000; step < steps; ++step) {
      engine->step(batch(8), forward,
                   {.step = step, .learning_rate = 0.1, .global_rows = 8 * (last + 1)});
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (mode == "slow") return 0;
  std::printf("rank %d finished without noticing the failure\n", comm::launched_rank());
  return 0;
}
