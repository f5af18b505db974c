#pragma once
// The live view of a training run: on a terminal a progress bar redrawn in
// place (epoch, step, ETA, loss, examples/second, each device's busy
// fraction, the share of time waiting for input); elsewhere (CI, a file) a plain line every few
// seconds; quiet prints nothing. Epoch results are a line each in both visible modes.

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "tandem/monitor/monitor.h"
#include "tandem/train/trainer.h"

namespace tandem::monitor {

enum class ProgressMode { bar, lines, quiet };

class ProgressView {
 public:
  // `monitor` (may be null) supplies throughput and busy fractions.
  ProgressView(ProgressMode mode, int64_t epochs, bool loss_scaling, const Monitor* monitor,
               std::FILE* out = stdout, double line_interval_seconds = 10.0);

  void on_step(const train::StepInfo& step);
  void on_epoch(const train::EpochResult& epoch);

 private:
  std::string status(const train::StepInfo& step) const;

  ProgressMode mode_;
  int64_t epochs_;
  bool loss_scaling_;
  const Monitor* monitor_;
  std::FILE* out_;
  double line_interval_seconds_;
  std::chrono::steady_clock::time_point last_draw_;
  bool bar_drawn_ = false;
};

}  // namespace tandem::monitor
