#pragma once
// Learning-rate schedules as pure functions of the global step (0-based), so
// a resumed run continues on exactly the same curve.

#include <cstdint>
#include <memory>
#include <string>

namespace tandem::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  double base_lr = 0.05;
  int64_t step_size = 1;     // step: decay every step_size steps
  double gamma = 0.1;        // step: multiplicative decay
  int64_t total_steps = 1;   // cosine: steps from base_lr down to min_lr
  double min_lr = 0.0;       // cosine
  int64_t warmup_steps = 0;  // any: linear ramp from base_lr / warmup_steps
};

// Throws InvalidArgument naming the bad field or the unknown schedule.
std::unique_ptr<LrSchedule> make_schedule(const ScheduleConfig& config);

}  // namespace tandem::optim
