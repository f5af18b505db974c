#include "tandem/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "tandem/base/error.h"
#include "tandem/base/name_table.h"

namespace tandem::optim {
namespace {

constexpr NameTable<ScheduleKind, 3> kSchedules{"learning-rate schedule",
                                                {{{ScheduleKind::constant, "constant"},
                                                  {ScheduleKind::step, "step"},
                                                  {ScheduleKind::cosine, "cosine"}}}};

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base) : base_(base) {}
  double lr(int64_t) const override { return base_; }
  std::string describe() const override { return fmt::format("constant {}", base_); }

 private:
  double base_;
};

// PyTorch's StepLR: base * gamma^(step / step_size).
class StepLr : public LrSchedule {
 public:
  StepLr(double base, int64_t step_size, double gamma)
      : base_(base), step_size_(step_size), gamma_(gamma) {}
  double lr(int64_t step) const override {
    return base_ * std::pow(gamma_, static_cast<double>(step / step_size_));
  }
  std::string describe() const override {
    return fmt::format("step {} x{} every {} steps", base_, gamma_, step_size_);
  }

 private:
  double base_;
  int64_t step_size_;
  double gamma_;
};

// PyTorch's CosineAnnealingLR without restarts; stays at min_lr afterwards.
class CosineLr : public LrSchedule {
 public:
  CosineLr(double base, int64_t total, double min_lr) : base_(base), total_(total), min_(min_lr) {}
  double lr(int64_t step) const override {
    const double progress = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_));
    return min_ + 0.5 * (base_ - min_) * (1.0 + std::cos(std::numbers::pi * progress));
  }
  std::string describe() const override {
    return fmt::format("cosine {} -> {} over {} steps", base_, min_, total_);
  }

 private:
  double base_;
  int64_t total_;
  double min_;
};

// Linear warm-up: step s < warmup gets inner(s) * (s + 1) / warmup.
class WarmupLr : public LrSchedule {
 public:
  WarmupLr(std::unique_ptr<LrSchedule> inner, int64_t warmup)
      : inner_(std::move(inner)), warmup_(warmup) {}
  double lr(int64_t step) const override {
    const double factor = step < warmup_ ? static_cast<double>(step + 1) / warmup_ : 1.0;
    return inner_->lr(step) * factor;
  }
  std::string describe() const override {
    return fmt::format("{} after {} warm-up steps", inner_->describe(), warmup_);
  }

 private:
  std::unique_ptr<LrSchedule> inner_;
  int64_t warmup_;
};

}  // namespace

std::string_view schedule_name(ScheduleKind kind) {
  return kSchedules.name(kind);
}

ScheduleKind parse_schedule(std::string_view name) {
  return kSchedules.parse(name);
}

std::unique_ptr<LrSchedule> make_schedule(const ScheduleConfig& c) {
  schedule_name(c.kind);  // refuses a value outside the enum
  if (!(c.base_lr >= 0.0) || !std::isfinite(c.base_lr)) {
    TANDEM_THROW(InvalidArgument, "learning rate must be finite and non-negative, got ", c.base_lr);
  }
  if (c.warmup_steps < 0)
    TANDEM_THROW(InvalidArgument, "warm-up steps must be >= 0, got ", c.warmup_steps);
  std::unique_ptr<LrSchedule> schedule;
  if (c.kind == ScheduleKind::constant) {
    schedule = std::make_unique<ConstantLr>(c.base_lr);
  } else if (c.kind == ScheduleKind::step) {
    if (c.step_size <= 0)
      TANDEM_THROW(InvalidArgument, "step schedule: step size must be positive, got ", c.step_size);
    if (!(c.gamma > 0.0))
      TANDEM_THROW(InvalidArgument, "step schedule: gamma must be positive, got ", c.gamma);
    schedule = std::make_unique<StepLr>(c.base_lr, c.step_size, c.gamma);
  } else {
    if (c.total_steps <= 0)
      TANDEM_THROW(InvalidArgument, "cosine schedule: total steps must be positive, got ",
                   c.total_steps);
    if (!(c.min_lr >= 0.0))
      TANDEM_THROW(InvalidArgument, "cosine schedule: min lr must be >= 0, got ", c.min_lr);
    schedule = std::make_unique<CosineLr>(c.base_lr, c.total_steps, c.min_lr);
  }
  if (c.warmup_steps > 0)
    schedule = std::make_unique<WarmupLr>(std::move(schedule), c.warmup_steps);
  return schedule;
}

double scaled_learning_rate(double learning_rate, const std::string& rule, int64_t batch,
                            int64_t reference_batch) {
  if (rule != "none" && rule != "linear" && rule != "sqrt") {
    TANDEM_THROW(InvalidArgument, "unknown learning-rate scaling rule '", rule,
                 "' (expected none, linear or sqrt)");
  }
  if (rule == "none") return learning_rate;
  if (reference_batch < 1 || batch < 1) {
    TANDEM_THROW(InvalidArgument, "learning-rate scaling '", rule,
                 "' needs the batch the rate was tuned at (--reference-batch, at least 1) and a "
                 "batch of at least 1, got ",
                 reference_batch, " and ", batch);
  }
  const double ratio = static_cast<double>(batch) / static_cast<double>(reference_batch);
  return learning_rate * (rule == "linear" ? ratio : std::sqrt(ratio));
}

}  // namespace tandem::optim
