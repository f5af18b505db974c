#pragma once
// tandem train's handling of SIGINT, SIGTERM and SIGUSR1: Ctrl-C; SIGTERM
// (what SLURM, Kubernetes and spot reclaim send before they kill, and mpirun
// to its ranks before killing them 1 s later); SIGUSR1 (what mpirun forwards
// to every rank without killing, and SLURM's --signal=USR1@SECONDS sends
// ahead of a time limit): every process agrees to stop at the next step,
// the chief writes a checkpoint, and the run exits with 128 + the signal. A
// second signal of the same kind terminates at once.

#include <array>
#include <csignal>

#include "tandem/train/trainer.h"

namespace tandem::cli {

// Routes the three signals to the trainer while it lives. Without a trainer
// (a parameter-server worker or shard rank, which serves rank 0) a signal is
// only noted: rank 0, signalled alike by mpirun, stops the job and writes
// the checkpoint, and this process serves until then.
class StopSignals {
 public:
  explicit StopSignals(train::Trainer* trainer);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The exit status of a run stopped by a signal: 128 + the signal (130
  // for Ctrl-C, 143 for SIGTERM, 138 for SIGUSR1); 130 when another
  // process's signal stopped this one.
  static int status();

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGUSR1};
  std::array<struct sigaction, 3> previous_ = {};
};

}  // namespace tandem::cli
