#pragma once
// metrics.jsonl's field names, in one place for the writer (Monitor) and the
// reader (report). Private: nlohmann/json stays out of public headers.

#include <nlohmann/json.hpp>

#include "tandem/monitor/run_stats.h"

namespace tandem::monitor::detail {

inline nlohmann::json to_json(const ReplicaTimes& r) {
  return {{"replica", r.replica},     {"forward", r.forward},
          {"backward", r.backward},   {"communication", r.communication},
          {"optimizer", r.optimizer}, {"idle", r.idle}};
}

inline ReplicaTimes replica_times_from_json(const nlohmann::json& j) {
  return {.replica = j.at("replica").get<int>(),
          .forward = j.at("forward").get<double>(),
          .backward = j.at("backward").get<double>(),
          .communication = j.at("communication").get<double>(),
          .optimizer = j.at("optimizer").get<double>(),
          .idle = j.at("idle").get<double>()};
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

// A step line as Monitor::write_step_line writes it (it formats the line
// directly for speed, with these names).
inline StepRecord step_from_json(const nlohmann::json& j) {
  StepRecord s;
  s.epoch = j.at("epoch").get<int64_t>();
  s.step = j.at("step").get<int64_t>();
  s.global_step = j.at("global_step").get<int64_t>();
  s.time = j.at("time").get<double>();
  s.loss = j.at("loss").is_number() ? j.at("loss").get<double>() : NAN;
  s.learning_rate = j.at("learning_rate").get<double>();
  s.batch_examples = j.at("batch_examples").get<int64_t>();
  s.step_seconds = j.at("step_seconds").get<double>();
  s.input_seconds = j.at("input_seconds").get<double>();
  for (const auto& r : j.at("replicas")) s.replicas.push_back(replica_times_from_json(r));
  s.flops = j.value("flops", 0.0);
  s.allreduce_bytes = j.value("allreduce_bytes", int64_t{0});
  s.allreduce_seconds = j.value("allreduce_seconds", 0.0);
  s.loss_scale = j.value("loss_scale", 1.0);
  s.skipped = j.value("skipped", false);
  return s;
}

}  // namespace tandem::monitor::detail
