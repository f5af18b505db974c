#pragma once
// Learning-rate schedules as pure functions of the global step (0-based), so
// a resumed run continues on exactly the same curve.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::optim {

enum class ScheduleKind : uint8_t { constant, step, cosine };

// "constant", "step", "cosine"; parse_schedule throws InvalidArgument naming
// the accepted ones.
std::string_view schedule_name(ScheduleKind kind);
ScheduleKind parse_schedule(std::string_view name);

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 0.05;
  int64_t step_size = 1;     // step: decay every step_size steps
  double gamma = 0.1;        // step: multiplicative decay
  int64_t total_steps = 1;   // cosine: steps from base_lr down to min_lr
  double min_lr = 0.0;       // cosine
  int64_t warmup_steps = 0;  // any: linear ramp from base_lr / warmup_steps
};

// Throws InvalidArgument naming the bad field.
std::unique_ptr<LrSchedule> make_schedule(const ScheduleConfig& config);

// Learning-rate scaling with the batch: a rate tuned at reference_batch,
// used at batch. "linear" (Goyal et al. 2017: k times the batch, k times
// the rate) for SGD-type optimizers, "sqrt" (square root of the ratio) for
// Adam-type ones, "none" (unchanged). Large factors want a gradual warm-up
// (Goyal et al.: 5 epochs). Throws InvalidArgument for an unknown rule or a
// batch or reference below 1.
double scaled_learning_rate(double learning_rate, const std::string& rule, int64_t batch,
                            int64_t reference_batch);

}  // namespace tandem::optim
