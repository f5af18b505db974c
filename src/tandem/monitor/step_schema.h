#pragma once
// The step record's schema, defined once: each scalar field of a
// metrics.jsonl step line and of each of its replicas, with its name, its
// meaning and where it lives in a StepRecord. The Monitor writes step lines
// from this table, `tandem report` reads them back with it, and the table in
// docs/monitoring.md is its Markdown (`tandem report --schema`; a test keeps
// the two equal). A new field is one row here.
//
// Nested parts of a step line (the all-reduce buckets, the memory snapshot)
// keep their own writers and readers in detail/metrics_json.h.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tandem/monitor/run_stats.h"

namespace tandem::monitor {

enum class FieldKind : uint8_t { integer, number, boolean };

// A field of the step itself.
struct StepField {
  std::string_view name;
  std::string_view meaning;  // one sentence, with the unit
  FieldKind kind;
  double missing;  // what a reader takes when an older line lacks it
  double (*get)(const StepRecord& record);
  void (*set)(StepRecord& record, double value);
};

// A field of one replica of the step (replicas[i]).
struct ReplicaField {
  std::string_view name;
  std::string_view meaning;
  FieldKind kind;
  double (*get)(const StepRecord& record, size_t replica);
  void (*set)(StepRecord& record, size_t replica, double value);
};

std::span<const StepField> step_fields();
std::span<const ReplicaField> replica_fields();

// Both tables as Markdown (field, type, meaning).
std::string step_schema_markdown();

}  // namespace tandem::monitor
