#include "tandem/monitor/progress_view.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace tandem::monitor {
namespace {

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// "acc 91.23%" for accuracies, "rmse 0.1234" otherwise.
std::string metric_text(const std::string& name, double value) {
  if (name.ends_with("accuracy")) {
    const std::string short_name =
        name == "accuracy" ? "acc" : name.substr(0, name.size() - 9) + " acc";
    return fmt::format("{} {:.2f}%", short_name, 100.0 * value);
  }
  return fmt::format("{} {:.4g}", name, value);
}

// "12/469" or "12" when the epoch's length is not known.
std::string step_text(const train::StepInfo& s) {
  return s.steps_per_epoch > 0 ? fmt::format("{}/{}", s.step, s.steps_per_epoch)
                               : std::to_string(s.step);
}

// The width of the terminal `out` writes to, or $COLUMNS, else 80.
int terminal_columns(std::FILE* out) {
  struct winsize size = {};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int n = std::atoi(columns);
    if (n > 0) return n;
  }
  return 80;
}

}  // namespace

std::string bar_line(int64_t epoch, int64_t epochs, int64_t step, int64_t steps_per_epoch,
                     const std::string& step_text, const std::string& status, int columns) {
  const auto room = static_cast<size_t>(std::max(columns - 1, 20));
  const std::string head = fmt::format("  epoch {}/{} ", epoch, epochs);
  const std::string tail = fmt::format(" {}  ", step_text);
  const auto bar = [&](int width) {
    const int filled =
        steps_per_epoch > 0
            ? static_cast<int>(width * std::min(step, steps_per_epoch) / steps_per_epoch)
            : 0;
    std::string cells = "[";
    cells.append(static_cast<size_t>(filled), '#');
    cells.append(static_cast<size_t>(width - filled), '.');
    return cells + "]";
  };
  const size_t fixed = head.size() + tail.size() + status.size();
  for (int width = 24; width >= 8; --width) {
    if (fixed + static_cast<size_t>(width) + 2 <= room) return head + bar(width) + tail + status;
  }
  // No room for a bar: the status, cut back to whole fields ("  " apart).
  std::string text = head + step_text + "  " + status;
  while (text.size() > room) {
    const size_t cut = text.rfind("  ");
    if (cut == std::string::npos || cut <= head.size() + step_text.size()) {
      text.resize(room);
      break;
    }
    text.resize(cut);
  }
  return text;
}

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
    if (s.steps_per_epoch > 0) {
      const int64_t remaining =
          (epochs_ - s.epoch) * s.steps_per_epoch + (s.steps_per_epoch - s.step);
      text += "  ETA " +
              duration_text(static_cast<double>(remaining) * monitor_->recent_step_seconds());
    }
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
    // Redrawn in place: the line fits the terminal (a wider one wraps and
    // scrolls), and \033[K clears what a longer previous line left.
    fmt::print(out_, "\r{}\033[K",
               bar_line(s.epoch, epochs_, s.step, s.steps_per_epoch, step_text(s), status(s),
                        terminal_columns(out_)));
    bar_drawn_ = true;
  } else {
    if (since < line_interval_seconds_) return;
    fmt::print(out_, "  epoch {}/{} step {}  {}\n", s.epoch, epochs_, step_text(s), status(s));
  }
  last_draw_ = now;
  std::fflush(out_);
}

void ProgressView::on_epoch(const train::EpochResult& e) {
  if (mode_ == ProgressMode::quiet) return;
  // Clear the bar so the epoch line replaces it.
  if (bar_drawn_) fmt::print(out_, "\r\033[K");
  bar_drawn_ = false;
  std::string figures = fmt::format("train loss {:.4f}", e.train_loss);
  for (const auto& [name, value] : e.train_metrics) figures += "  " + metric_text(name, value);
  if (e.validated) {
    figures += fmt::format("  validation loss {:.4f}", e.validation_loss);
    for (const auto& [name, value] : e.validation_metrics)
      figures += "  " + metric_text(name, value);
  }
  fmt::print(out_, "epoch {}/{}  {}  {:.0f} ex/s  {:.1f} s{}\n", e.epoch, epochs_, figures,
             e.examples_per_second, e.train_seconds,
             loss_scaling_
                 ? fmt::format("  loss scale {:g} ({} skipped)", e.loss_scale, e.skipped_steps)
                 : std::string());
  last_draw_ = std::chrono::steady_clock::now();
  std::fflush(out_);
}

}  // namespace tandem::monitor
