#pragma once
// Stand-in compute for `tandem bench allreduce --busy-threads`: threads of
// dependent register arithmetic that run while a collective does, as
// training's compute runs while its buckets are all-reduced. How fast they
// go then, against how fast they go alone, is the share of the cores that
// communication leaves to compute (the scaling planner's model of overlap).

#include <functional>

namespace tandem::cli {

// Runs `threads` busy threads while `body` runs on the calling thread and
// returns the work they did per second of it (units of about 4,096
// multiply-adds, summed over the threads). threads >= 1.
double busy_work_per_second(int threads, const std::function<void()>& body);

}  // namespace tandem::cli
