#include "tandem/monitor/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::monitor {
namespace {

constexpr double kWidth = 560, kHeight = 260;
constexpr double kLeft = 64, kRight = 16, kTop = 30, kBottom = 44;
constexpr int kMaxTicks = 50;  // bounds the tick loops whatever the data

// Bar values that can be drawn: negative, NaN and infinite ones count as 0.
double drawable(double v) {
  return std::isfinite(v) && v > 0.0 ? v : 0.0;
}

// 1, 2 or 5 times a power of ten, so that about `count` ticks span `range`.
double tick_step(double range, int count) {
  if (!(range > 0.0)) return 1.0;
  const double raw = range / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10.0 * power;
}

std::string number(double v, double step) {
  if (std::abs(v) >= 1e6) return fmt::format("{:.3g}", v);
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", v, std::min(decimals, 6));
}

// Legend entries left to right, wrapping onto a new row when the width runs
// out; rows grow upwards from `bottom`. Returns the SVG and the rows used.
std::pair<std::string, int> legend(const std::vector<std::pair<std::string, std::string>>& entries,
                                   double left, double bottom) {
  std::vector<std::vector<std::pair<double, size_t>>> rows(1);
  double x = left;
  for (size_t i = 0; i < entries.size(); ++i) {
    const double w = 24 + 6.5 * static_cast<double>(entries[i].first.size());
    if (x + w > kWidth - kRight && x > left) rows.emplace_back(), x = left;
    rows.back().emplace_back(x, i);
    x += w;
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = bottom - 16.0 * static_cast<double>(rows.size() - 1 - r);
    for (const auto& [ex, i] : rows[r]) {
      out += fmt::format(
          "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
          "<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"11\">{}</text>",
          ex, y - 9, entries[i].second, ex + 14, y, html_escape(entries[i].first));
    }
  }
  return {out, static_cast<int>(rows.size())};
}

std::string open_svg(const std::string& id, const std::string& title, double height) {
  return fmt::format(
      "<svg class=\"chart\" data-chart=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\">"
      "<title>{}</title><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>"
      "<text x=\"{:.0f}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>",
      html_escape(id), kWidth, height, kWidth, height, html_escape(title), kLeft,
      html_escape(title));
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string line_chart(const LineChartSpec& spec) {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
  for (const Series& s : spec.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x_min = std::min(x_min, s.x[i]), x_max = std::max(x_max, s.x[i]);
      y_min = std::min(y_min, s.y[i]), y_max = std::max(y_max, s.y[i]);
    }
  }
  std::string svg = open_svg(spec.id, spec.title, kHeight);
  if (!std::isfinite(x_min)) {
    svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"12\">no data</text></svg>",
                       kLeft, kHeight / 2);
    return svg;
  }
  if (spec.y_from_zero) y_min = std::min(0.0, y_min);
  if (spec.y_max > 0.0) y_max = std::max(y_max, spec.y_max);
  // A flat or single-point series still needs a range; relative to the
  // values' size so that huge values do not swallow the widening.
  if (!(x_max - x_min > 1e-9 * std::abs(x_min))) x_max = x_min + std::max(1.0, std::abs(x_min));
  if (!(y_max - y_min > 1e-9 * std::abs(y_min))) y_max = y_min + std::max(1.0, std::abs(y_min));
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom - 14;
  const auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_w; };
  const auto py = [&](double y) { return kTop + plot_h - (y - y_min) / (y_max - y_min) * plot_h; };
  // Grid and axes.
  const double y_step = tick_step(y_max - y_min, 5);
  const double y_first = std::ceil(y_min / y_step);
  for (int k = 0; k <= kMaxTicks; ++k) {
    const double y = (y_first + k) * y_step;
    if (y > y_max + 1e-9 * y_step) break;
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
        kLeft, py(y), kLeft + plot_w, py(y), kLeft - 4, py(y) + 3,
        spec.percent ? number(100.0 * y, 100.0 * y_step) + "%" : number(y, y_step));
  }
  bool integer_x = true;
  for (const Series& s : spec.series)
    for (double x : s.x) integer_x = integer_x && x == std::floor(x);
  const double x_step =
      integer_x ? std::max(1.0, tick_step(x_max - x_min, 6)) : tick_step(x_max - x_min, 6);
  const double x_first = std::ceil(x_min / x_step);
  for (int k = 0; k <= kMaxTicks; ++k) {
    const double x = (x_first + k) * x_step;
    if (x > x_max + 1e-9 * x_step) break;
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{}</text>", px(x),
        kTop + plot_h + 13, number(x, x_step));
  }
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\"/>"
      "<line x1=\"{0:.1f}\" y1=\"{3:.1f}\" x2=\"{0:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\"/>"
      "<text x=\"{4:.1f}\" y=\"{5:.1f}\" font-size=\"11\" text-anchor=\"middle\">{6}</text>"
      "<text x=\"12\" y=\"{7:.1f}\" font-size=\"11\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 12 {7:.1f})\">{8}</text>",
      kLeft, kTop + plot_h, kLeft + plot_w, kTop, kLeft + plot_w / 2, kTop + plot_h + 27,
      html_escape(spec.x_label), kTop + plot_h / 2, html_escape(spec.y_label));
  std::vector<std::pair<std::string, std::string>> entries;
  for (const Series& s : spec.series) {
    std::string path, dots;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", px(s.x[i]), py(s.y[i]));
      if (s.markers)
        dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", px(s.x[i]),
                            py(s.y[i]), s.color);
    }
    if (path.empty()) continue;
    svg += fmt::format(
        "<path class=\"series\" data-series=\"{}\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"1.6\"/>{}",
        html_escape(s.name), path, s.color, dots);
    entries.emplace_back(s.name, s.color);
  }
  svg += legend(entries, kLeft, kHeight - 5).first + "</svg>";
  return svg;
}

std::string stacked_bar_chart(const StackedBarSpec& spec) {
  constexpr double kBar = 26, kGap = 12;
  const double plot_w = kWidth - 110 - kRight;
  std::vector<std::pair<std::string, std::string>> entries;
  for (size_t p = 0; p < spec.parts.size(); ++p)
    entries.emplace_back(spec.parts[p], spec.colors.at(p));
  const int legend_rows = legend(entries, 12, 0).second;
  const double height =
      kTop + static_cast<double>(spec.bars.size()) * (kBar + kGap) + 60 + 16.0 * (legend_rows - 1);
  double total_max = 0.0;
  for (const auto& row : spec.values) {
    double total = 0.0;
    for (double v : row) total += drawable(v);
    total_max = std::max(total_max, total);
  }
  if (!(total_max > 0.0)) total_max = 1.0;
  const double step = tick_step(total_max, 5);
  const double axis_max = std::ceil(total_max / step) * step;
  std::string svg = open_svg(spec.id, spec.title, height);
  const double left = 110;
  const double bottom = kTop + static_cast<double>(spec.bars.size()) * (kBar + kGap);
  for (int k = 0; k <= kMaxTicks; ++k) {
    const double t = k * step;
    if (t > axis_max + 1e-9 * step) break;
    const double x = left + t / axis_max * plot_w;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" font-size=\"10\" text-anchor=\"middle\">{4}</text>",
        x, kTop - 4, bottom, bottom + 12, number(t, step));
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
      left + plot_w / 2, bottom + 26, html_escape(spec.unit));
  for (size_t b = 0; b < spec.bars.size(); ++b) {
    const double y = kTop + static_cast<double>(b) * (kBar + kGap);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>", left - 6,
        y + kBar / 2 + 4, html_escape(spec.bars[b]));
    double x = left;
    for (size_t p = 0; p < spec.parts.size() && b < spec.values.size() && p < spec.values[b].size();
         ++p) {
      const double w = drawable(spec.values[b][p]) / axis_max * plot_w;
      if (w <= 0.0) continue;
      svg += fmt::format(
          "<rect class=\"segment\" data-part=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" "
          "height=\"{:.0f}\" fill=\"{}\"><title>{}: {:.4g} {}</title></rect>",
          html_escape(spec.parts[p]), x, y, w, kBar, spec.colors.at(p), html_escape(spec.parts[p]),
          spec.values[b][p], html_escape(spec.unit));
      x += w;
    }
  }
  svg += legend(entries, 12, height - 9).first;

  svg += "</svg>";
  return svg;
}

}  // namespace tandem::monitor
