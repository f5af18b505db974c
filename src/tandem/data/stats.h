#pragma once
// Per-stage pipeline statistics, accumulated over every pass: what the
// monitoring layer reads and `tandem bench pipeline` prints.

#include <cstdint>
#include <string>

namespace tandem::data {

struct StageStats {
  std::string stage;            // "map(autotune)", "batch(128)", ...
  int64_t elements = 0;         // produced by this stage
  double busy_seconds = 0.0;    // spent producing (its own work, all threads)
  double wait_seconds = 0.0;    // spent waiting for its input
  double mean_buffer = 0.0;     // mean occupancy of its buffer (parallel stages)
  int64_t buffer_capacity = 0;  // current buffer size or parallelism (autotuned)
};

}  // namespace tandem::data
