#pragma once
// How the memory plan (train/memory_plan.h) reaches users: the run
// header's lines, the table of `tandem plan memory`, and summary.json's
// memory_plan section (predicted beside measured), plus --memory-limit's
// byte counts.

#include <cstdint>
#include <string>

#include "tandem/train/memory_plan.h"

namespace tandem::cli {

// A byte count: a whole number, optionally followed by K, M, G or T
// (powers of 1024; "KiB", "MB" and the like are read the same). Throws
// InvalidArgument naming the flag for anything else, zero, or more than 2^62.
int64_t parse_bytes(const std::string& flag, const std::string& text);

// Two lines for the run header: the fullest device's predicted peak against
// the limit, and its largest categories.
std::string describe_plan(const train::MemoryPlan& plan, int64_t limit_bytes);

// One row per device, one column per category and the total, in MiB.
std::string plan_table(const train::MemoryPlan& plan, int64_t limit_bytes);

// The plan as JSON; with measured, each device's measured peaks (its
// allocator's high-water marks) beside the predicted ones.
std::string plan_json(const train::MemoryPlan& plan, int64_t limit_bytes, bool measured);

}  // namespace tandem::cli
