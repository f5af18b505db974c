#pragma once
// Self-contained SVG charts for report.html: line charts and horizontal
// stacked bars, drawn as plain SVG elements (no script, no fonts to fetch).
// Every chart is an <svg class="chart" data-chart="ID"> whose series are
// elements of class "series" (paths) or "segment" (bar rectangles), so a test
// can find them.

#include <string>
#include <vector>

namespace tandem::monitor {

struct Series {
  std::string name;
  std::string color;  // CSS colour
  std::vector<double> x, y;
  bool markers = false;  // a dot at each point (sparse series such as epochs)
};

struct LineChartSpec {
  std::string id;  // data-chart attribute
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = true;
  double y_max = 0.0;    // > 0: fixed upper bound (e.g. 1 for fractions)
  bool percent = false;  // y values are fractions, labelled as percentages
};

std::string line_chart(const LineChartSpec& spec);

struct StackedBarSpec {
  std::string id;
  std::string title;
  std::string unit;                         // axis label, e.g. "ms per step"
  std::vector<std::string> parts;           // legend, in stacking order
  std::vector<std::string> colors;          // one per part
  std::vector<std::string> bars;            // one label per bar
  std::vector<std::vector<double>> values;  // [bar][part]
};

std::string stacked_bar_chart(const StackedBarSpec& spec);

// Escapes text for HTML/SVG content and attributes.
std::string html_escape(const std::string& text);

}  // namespace tandem::monitor
