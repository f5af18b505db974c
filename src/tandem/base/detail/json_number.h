#pragma once
// Floating-point figures in the JSON files tandem writes (summary.json,
// metrics.jsonl, search states, benchmark tables): JSON has no NaN or
// infinity, so a figure that is not finite (no validation data, a target
// not reached) is written as null and read back as NaN. Private:
// nlohmann/json stays out of public headers.

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace tandem::detail {

inline nlohmann::json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// object[key] as a double; NaN when absent or not a number.
inline double number_or_nan(const nlohmann::json& object, const char* key) {
  if (!object.contains(key) || !object.at(key).is_number())
    return std::numeric_limits<double>::quiet_NaN();
  return object.at(key).get<double>();
}

}  // namespace tandem::detail
