#pragma once
// metrics.jsonl's field names, in one place for the writer (Monitor) and the
// reader (report). Private: nlohmann/json stays out of public headers.

#include <cmath>
#include <nlohmann/json.hpp>

#include "tandem/data/stats.h"
#include "tandem/monitor/run_stats.h"

namespace tandem::monitor::detail {

// A number, NaN where the line holds null (how NaN and infinities are
// written) or lacks the key.
inline double number_or_nan(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

inline nlohmann::json to_json(const ReplicaTimes& r) {
  return {{"replica", r.replica},     {"forward", r.forward},
          {"backward", r.backward},   {"communication", r.communication},
          {"optimizer", r.optimizer}, {"idle", r.idle}};
}

inline ReplicaTimes replica_times_from_json(const nlohmann::json& j) {
  return {.replica = j.at("replica").get<int>(),
          .forward = number_or_nan(j, "forward"),
          .backward = number_or_nan(j, "backward"),
          .communication = number_or_nan(j, "communication"),
          .optimizer = number_or_nan(j, "optimizer"),
          .idle = number_or_nan(j, "idle")};
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
    m.in_use[c] = j.at("bytes_in_use").value(name, int64_t{0});
    m.peak[c] = j.at("peak_bytes").value(name, int64_t{0});
  }
  m.peak_total = j.at("peak_total_bytes").get<int64_t>();
  m.capacity = j.value("capacity_bytes", int64_t{0});
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

// A step line as Monitor::write_step_line writes it (it formats the line
// directly for speed, with these names).
inline StepRecord step_from_json(const nlohmann::json& j) {
  StepRecord s;
  s.epoch = j.at("epoch").get<int64_t>();
  s.step = j.at("step").get<int64_t>();
  s.global_step = j.at("global_step").get<int64_t>();
  s.time = number_or_nan(j, "time");
  s.loss = number_or_nan(j, "loss");
  s.learning_rate = number_or_nan(j, "learning_rate");
  s.batch_examples = j.at("batch_examples").get<int64_t>();
  s.step_seconds = number_or_nan(j, "step_seconds");
  s.input_seconds = number_or_nan(j, "input_seconds");
  for (const auto& r : j.at("replicas")) s.replicas.push_back(replica_times_from_json(r));
  const auto or_default = [&](const char* key, double fallback) {
    const double v = number_or_nan(j, key);
    return std::isfinite(v) ? v : fallback;
  };
  s.flops = or_default("flops", 0.0);
  s.allreduce_bytes = j.value("allreduce_bytes", int64_t{0});
  s.allreduce_seconds = or_default("allreduce_seconds", 0.0);
  s.loss_scale = or_default("loss_scale", 1.0);
  s.skipped = j.value("skipped", false);
  return s;
}

}  // namespace tandem::monitor::detail
