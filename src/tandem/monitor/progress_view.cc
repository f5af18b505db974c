#include "tandem/monitor/progress_view.h"

#include <fmt/format.h>

#include <cmath>

namespace tandem::monitor {
namespace {

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

ProgressView::ProgressView(ProgressMode mode, int64_t epochs, bool loss_scaling,
                           const Monitor* monitor, std::FILE* out, double line_interval_seconds)
    : mode_(mode),
      epochs_(epochs),
      loss_scaling_(loss_scaling),
      monitor_(monitor),
      out_(out),
      line_interval_seconds_(line_interval_seconds),
      last_draw_(std::chrono::steady_clock::now()) {}

std::string ProgressView::status(const train::StepInfo& s) const {
  std::string text = fmt::format("loss {:.4f}", s.loss);
  if (monitor_ != nullptr) {
    const double rate = monitor_->recent_examples_per_second();
    text += fmt::format("  {:.0f} ex/s", rate);
    const std::vector<double> busy = monitor_->busy_fractions();
    if (!busy.empty()) {
      text += "  busy";
      for (double b : busy) text += fmt::format(" {:.0f}%", 100.0 * b);
    }
    text += fmt::format("  input {:.0f}%", 100.0 * monitor_->recent_input_fraction());
    const int64_t remaining =
        (epochs_ - s.epoch) * s.steps_per_epoch + (s.steps_per_epoch - s.step);
    text +=
        "  ETA " + duration_text(static_cast<double>(remaining) * monitor_->recent_step_seconds());
  }
  if (loss_scaling_) text += fmt::format("  scale {:g}", s.loss_scale);
  return text;
}

void ProgressView::on_step(const train::StepInfo& s) {
  if (mode_ == ProgressMode::quiet) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (mode_ == ProgressMode::bar) {
    if (since < 0.2 && s.step != s.steps_per_epoch) return;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * s.step / std::max<int64_t>(1, s.steps_per_epoch));
    fmt::print(out_, "\r  epoch {}/{} [{}{}] {}/{}  {}   ", s.epoch, epochs_,
               std::string(filled, '#'), std::string(kWidth - filled, '.'), s.step,
               s.steps_per_epoch, status(s));
    bar_drawn_ = true;
  } else {
    if (since < line_interval_seconds_) return;
    fmt::print(out_, "  epoch {}/{} step {}/{}  {}\n", s.epoch, epochs_, s.step, s.steps_per_epoch,
               status(s));
  }
  last_draw_ = now;
  std::fflush(out_);
}

void ProgressView::on_epoch(const train::EpochResult& e) {
  if (mode_ == ProgressMode::quiet) return;
  // Clear the bar so the epoch line replaces it.
  if (bar_drawn_) fmt::print(out_, "\r\033[K");
  bar_drawn_ = false;
  fmt::print(out_,
             "epoch {}/{}  train loss {:.4f}  train acc {:.2f}%  test loss {:.4f}  test acc "
             "{:.2f}%  {:.0f} ex/s  {:.1f} s{}\n",
             e.epoch, epochs_, e.train_loss, 100.0 * e.train_accuracy, e.test_loss,
             100.0 * e.test_accuracy, e.examples_per_second, e.train_seconds,
             loss_scaling_
                 ? fmt::format("  loss scale {:g} ({} skipped)", e.loss_scale, e.skipped_steps)
                 : std::string());
  last_draw_ = std::chrono::steady_clock::now();
  std::fflush(out_);
}

}  // namespace tandem::monitor
