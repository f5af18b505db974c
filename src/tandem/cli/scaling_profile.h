#pragma once
// The step profile `tandem plan scaling` plans from (train/scaling_plan.h):
// a profiled run's (its model, batch and measured step, with when backward
// makes each gradient ready) or one described by numbers in JSON.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tandem/train/scaling_plan.h"

namespace tandem::cli {

struct ScalingProfile {
  train::StepProfile step;
  std::string model;
  int64_t parameters = 0;
  std::string readiness = "size";  // what said when each gradient is ready
  int devices = 1;                 // replicas of the profiled run
};

// From a run directory's summary, model and metrics (InvalidArgument naming
// what is missing), or from a JSON file of numbers: {"model", "examples",
// "forward_ms", "backward_ms", "optimizer_ms", "other_ms", and "gradients"
// (f32 elements in backward order) or "parameters" and "tensors"}.
ScalingProfile profile_from_run(const std::string& run_dir);
ScalingProfile profile_from_json(const std::string& path);

// A JSON file of plan scaling's inputs (at most 64 MiB), and a number in
// one; InvalidArgument naming the file or place otherwise.
nlohmann::json read_json(const std::string& path, std::string_view what);
double number_at(const nlohmann::json& j, const char* key, const std::string& where);
// A count read as a JSON number: whole and within [low, high] (a cast of a
// fraction truncates, and of a number past int64 is undefined).
int64_t count_at(const nlohmann::json& j, const char* key, const std::string& where, int64_t low,
                 int64_t high);

}  // namespace tandem::cli
