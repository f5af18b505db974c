#pragma once
// metrics.jsonl's field names, in one place for the writer (Monitor) and the
// reader (report). Private: nlohmann/json stays out of public headers.

#include <cmath>
#include <nlohmann/json.hpp>

#include "tandem/base/detail/json_integer.h"
#include "tandem/base/detail/json_number.h"
#include "tandem/data/stats.h"
#include "tandem/monitor/run_stats.h"
#include "tandem/monitor/step_schema.h"

namespace tandem::monitor::detail {

using tandem::detail::number_or_nan;

inline nlohmann::json to_json(const ReplicaTimes& r) {
  nlohmann::json j = {{"replica", r.replica},     {"forward", r.forward},
                      {"backward", r.backward},   {"communication", r.communication},
                      {"optimizer", r.optimizer}, {"idle", r.idle}};
  if (std::isfinite(r.examples)) j["examples"] = r.examples;
  return j;
}

inline ReplicaTimes replica_times_from_json(const nlohmann::json& j) {
  return {.replica = tandem::detail::json_integer<int>(j.at("replica"), "'replica'"),
          .forward = number_or_nan(j, "forward"),
          .backward = number_or_nan(j, "backward"),
          .communication = number_or_nan(j, "communication"),
          .optimizer = number_or_nan(j, "optimizer"),
          .idle = number_or_nan(j, "idle"),
          .examples = number_or_nan(j, "examples")};
}

inline nlohmann::json to_json(const DeviceMemory& m) {
  nlohmann::json in_use = nlohmann::json::object(), peak = nlohmann::json::object();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const std::string name(memory_category_name(static_cast<MemoryCategory>(c)));
    in_use[name] = m.in_use[c];
    peak[name] = m.peak[c];
  }
  return {{"device", m.device},
          {"bytes_in_use", in_use},
          {"peak_bytes", peak},
          {"peak_total_bytes", m.peak_total},
          {"capacity_bytes", m.capacity}};
}

inline DeviceMemory device_memory_from_json(const nlohmann::json& j) {
  DeviceMemory m;
  m.device = j.at("device").get<std::string>();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const std::string name(memory_category_name(static_cast<MemoryCategory>(c)));
    m.in_use[c] = tandem::detail::json_integer_or(j.at("bytes_in_use"), name.c_str(), int64_t{0});
    m.peak[c] = tandem::detail::json_integer_or(j.at("peak_bytes"), name.c_str(), int64_t{0});
  }
  m.peak_total =
      tandem::detail::json_integer<int64_t>(j.at("peak_total_bytes"), "'peak_total_bytes'");
  m.capacity = tandem::detail::json_integer_or(j, "capacity_bytes", int64_t{0});
  return m;
}

inline nlohmann::json to_json(const data::StageStats& s) {
  return {{"stage", s.stage},
          {"elements", s.elements},
          {"busy_seconds", s.busy_seconds},
          {"wait_seconds", s.wait_seconds},
          {"mean_buffer", s.mean_buffer},
          {"buffer_capacity", s.buffer_capacity}};
}

// A step line as Monitor::write_step_line writes it (both from the schema).
inline StepRecord step_from_json(const nlohmann::json& j) {
  StepRecord s;
  for (const StepField& f : step_fields()) {
    const auto it = j.find(f.name);
    double v = f.missing;
    if (it != j.end() && it->is_number()) v = it->get<double>();
    if (it != j.end() && it->is_boolean()) v = it->get<bool>() ? 1.0 : 0.0;
    f.set(s, v);
  }
  for (const auto& r : j.at("replicas")) {
    s.replicas.emplace_back();
    for (const ReplicaField& f : replica_fields()) {
      const auto it = r.find(f.name);
      const double missing = f.kind == FieldKind::number ? NAN : 0.0;
      f.set(s, s.replicas.size() - 1,
            it != r.end() && it->is_number() ? it->get<double>() : missing);
    }
  }
  return s;
}

}  // namespace tandem::monitor::detail
