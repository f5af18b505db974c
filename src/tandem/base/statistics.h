#pragma once
// Small summary statistics for benchmarks and monitoring.

#include <vector>

namespace tandem {

// The median: the middle value, or the mean of the two middle values for an
// even count; 0 for no values.
double median(std::vector<double> values);

}  // namespace tandem
