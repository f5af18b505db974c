#pragma once
// The live view of a training run: on a terminal a progress bar redrawn in
// place (epoch, step, ETA, loss, examples/second, each device's busy
// fraction, the share of time waiting for input); elsewhere (CI, a file) a plain line every few
// seconds; quiet prints nothing. Epoch results are a line each in both visible modes.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tandem/monitor/monitor.h"
#include "tandem/train/trainer.h"

namespace tandem::monitor {

enum class ProgressMode { bar, lines, quiet };

// One redraw of the progress bar that fits a terminal `columns` wide (one
// column spare, so it never wraps): the bar shrinks first, from 24 cells
// to 8, then goes, then the status is cut at a field boundary.
std::string bar_line(int64_t epoch, int64_t epochs, int64_t step, int64_t steps_per_epoch,
                     const std::string& step_text, const std::string& status, int columns);

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
