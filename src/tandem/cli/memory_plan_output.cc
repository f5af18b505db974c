#include "tandem/cli/memory_plan_output.h"

#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/cli/commands.h"

namespace tandem::cli {
namespace {

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

constexpr MemoryCategory kCategories[] = {
    MemoryCategory::parameters,  MemoryCategory::gradients, MemoryCategory::optimizer_state,
    MemoryCategory::activations, MemoryCategory::workspace, MemoryCategory::communication,
    MemoryCategory::input};

}  // namespace

int64_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::optional<int64_t> number = parse_number<int64_t>(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  for (const auto& [letter, bits] : {std::pair{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}}) {
    const std::string l(1, letter);
    if (unit == l || unit == l + "B" || unit == l + "IB") shift = bits;
  }
  constexpr int64_t kMax = int64_t{1} << 62;
  if (!number || shift < 0 || *number < 1 || *number > (kMax >> shift)) {
    TANDEM_THROW(InvalidArgument, flag,
                 " must be a positive byte count, optionally with K, M, G or T (powers of 1024), "
                 "at most 2^62 bytes; got '",
                 text, "'");
  }
  return *number << shift;
}

std::string describe_plan(const train::MemoryPlan& plan, int64_t limit_bytes) {
  const int64_t micro = plan.micro_batch;
  const train::DeviceMemoryPlan& d = plan.fullest(micro);
  std::string parts;
  for (MemoryCategory c : kCategories) {
    const int64_t bytes = d.bytes(c, micro);
    if (bytes < (64 << 10)) continue;  // under 64 KiB: not worth a word
    parts +=
        fmt::format("{}{} {:.1f}", parts.empty() ? "" : ", ", memory_category_name(c), mib(bytes));
  }
  return fmt::format(
      "  memory plan: {:.1f} MiB predicted peak on {} (limit {:.0f} MiB; the largest batch that "
      "fits: micro-batch {}), traced in {:.1f} s\n    MiB: {}\n",
      mib(d.total(micro)), d.device.to_string(), mib(limit_bytes),
      plan.largest_micro_batch(limit_bytes), plan.trace_seconds, parts);
}

std::string plan_table(const train::MemoryPlan& plan, int64_t limit_bytes) {
  std::string out = fmt::format("{:<8}", "device");
  for (MemoryCategory c : kCategories) out += fmt::format(" {:>15}", memory_category_name(c));
  out += fmt::format(" {:>12}\n", "total");
  for (const train::DeviceMemoryPlan& d : plan.devices) {
    out += fmt::format("{:<8}", d.device.to_string());
    for (MemoryCategory c : kCategories)
      out += fmt::format(" {:>15.2f}", mib(d.bytes(c, plan.micro_batch)));
    out += fmt::format(" {:>12.2f}\n", mib(d.total(plan.micro_batch)));
  }
  out += fmt::format(
      "(MiB per device; micro-batch {} x {} accumulation step(s) x {} replica(s); limit {:.0f} "
      "MiB per device, the largest micro-batch that fits: {})\n",
      plan.micro_batch, plan.accumulation_steps, plan.global_replicas, mib(limit_bytes),
      plan.largest_micro_batch(limit_bytes));
  return out;
}

std::string plan_json(const train::MemoryPlan& plan, int64_t limit_bytes, bool measured) {
  nlohmann::json devices = nlohmann::json::array();
  for (const train::DeviceMemoryPlan& d : plan.devices) {
    nlohmann::json predicted = nlohmann::json::object();
    for (MemoryCategory c : kCategories)
      predicted[std::string(memory_category_name(c))] = d.bytes(c, plan.micro_batch);
    nlohmann::json entry = {{"device", d.device.to_string()},
                            {"predicted_bytes", predicted},
                            {"predicted_peak_bytes", d.total(plan.micro_batch)}};
    if (measured) {
      const MemoryStats s = allocator_for(d.device).stats();
      nlohmann::json peaks = nlohmann::json::object();
      for (MemoryCategory c : kCategories)
        peaks[std::string(memory_category_name(c))] = s.high_water_bytes[static_cast<int>(c)];
      entry["measured_bytes"] = peaks;
      entry["measured_peak_bytes"] = s.high_water_total_bytes;
    }
    devices.push_back(entry);
  }
  const nlohmann::json out = {{"micro_batch", plan.micro_batch},
                              {"accumulation_steps", plan.accumulation_steps},
                              {"replicas", plan.global_replicas},
                              {"parameters", plan.parameter_count},
                              {"limit_bytes", limit_bytes},
                              {"largest_micro_batch", plan.largest_micro_batch(limit_bytes)},
                              {"traced_rows", plan.traced_rows},
                              {"trace_seconds", plan.trace_seconds},
                              {"devices", devices}};
  return out.dump();
}

}  // namespace tandem::cli
