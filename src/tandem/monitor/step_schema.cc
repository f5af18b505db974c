#include "tandem/monitor/step_schema.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tandem/base/error.h"

namespace tandem::monitor {
namespace {

// A value read back from a file, as the member's type. A floating-point
// value cast to an integer it does not fit is undefined behaviour, and a
// corrupt line can hold 1e38 or 2.5 where a step count belongs: refused.
template <class T>
T member_value(double v, const char* member) {
  if constexpr (std::is_same_v<T, bool> || std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::trunc(v) == v && v >= -0x1p63 && v < 0x1p63 &&
        std::in_range<T>(static_cast<int64_t>(v)))
      return static_cast<T>(v);
    TANDEM_THROW(IoError, "'", member, "' is ", v, ", not an integer in range");
  }
}

// Accessor pairs for a member of StepRecord or of its replica i.
#define TANDEM_STEP_MEMBER(member)                                   \
  [](const StepRecord& r) { return static_cast<double>(r.member); }, \
      [](StepRecord& r, double v) { r.member = member_value<decltype(r.member)>(v, #member); }
#define TANDEM_REPLICA_MEMBER(member)                                                      \
  [](const StepRecord& r, size_t i) { return static_cast<double>(r.replicas[i].member); }, \
      [](StepRecord& r, size_t i, double v) {                                              \
        r.replicas[i].member = member_value<decltype(r.replicas[i].member)>(v, #member);   \
      }

const StepField kStepFields[] = {
    {"epoch", "epoch, 1-based", FieldKind::integer, 0, TANDEM_STEP_MEMBER(epoch)},
    {"step", "step within the epoch, 1-based", FieldKind::integer, 0, TANDEM_STEP_MEMBER(step)},
    {"global_step", "step over the run, 1-based", FieldKind::integer, 0,
     TANDEM_STEP_MEMBER(global_step)},
    {"time", "seconds since the run started (a resumed run continues the axis), at the step's end",
     FieldKind::number, NAN, TANDEM_STEP_MEMBER(time)},
    {"loss", "mean per-example loss of the global batch (every process's examples)",
     FieldKind::number, NAN, TANDEM_STEP_MEMBER(loss)},
    {"learning_rate", "the rate the step applied", FieldKind::number, NAN,
     TANDEM_STEP_MEMBER(learning_rate)},
    {"batch_examples", "examples in the global batch", FieldKind::integer, 0,
     TANDEM_STEP_MEMBER(batch_examples)},
    {"step_seconds", "the step's wall time, input included (s)", FieldKind::number, NAN,
     TANDEM_STEP_MEMBER(step_seconds)},
    {"input_seconds", "waiting for this process's batch (s)", FieldKind::number, NAN,
     TANDEM_STEP_MEMBER(input_seconds)},
    {"examples_per_second", "batch_examples / step_seconds", FieldKind::number, NAN,
     TANDEM_STEP_MEMBER(examples_per_second)},
    {"loss_scale", "the loss scale after the step (1 without loss scaling)", FieldKind::number, 1.0,
     TANDEM_STEP_MEMBER(loss_scale)},
    {"gradient_norm",
     "global L2 norm of the reduced, unscaled gradients before clipping (null without "
     "--clip-norm)",
     FieldKind::number, NAN, TANDEM_STEP_MEMBER(gradient_norm)},
    {"noise_scale",
     "the smoothed gradient noise scale B_simple in examples (null until measured; "
     "--noise-scale-every; docs/tuning.md)",
     FieldKind::number, NAN, TANDEM_STEP_MEMBER(noise_scale)},
    {"skipped", "the update was skipped (non-finite gradients under loss scaling)",
     FieldKind::boolean, 0, TANDEM_STEP_MEMBER(skipped)},
    {"flops", "floating-point operations the matrix kernels of this process ran", FieldKind::number,
     0.0, TANDEM_STEP_MEMBER(flops)},
    {"flops_per_second", "flops / step_seconds", FieldKind::number, 0.0,
     TANDEM_STEP_MEMBER(flops_per_second)},
    {"peak_fraction", "flops_per_second over the devices' measured matmul peak (null: unknown)",
     FieldKind::number, NAN, TANDEM_STEP_MEMBER(peak_fraction)},
    {"allreduce_bytes", "wire bytes of local replica 0's gradient all-reduces", FieldKind::integer,
     0, TANDEM_STEP_MEMBER(allreduce_bytes)},
    {"allreduce_seconds", "their collectives' durations, summed (s)", FieldKind::number, 0.0,
     TANDEM_STEP_MEMBER(allreduce_seconds)},
    {"rss_bytes", "the process's resident set, read at most once a second", FieldKind::integer, 0,
     TANDEM_STEP_MEMBER(rss_bytes)},
};

const ReplicaField kReplicaFields[] = {
    {"replica", "global replica index", FieldKind::integer, TANDEM_REPLICA_MEMBER(replica)},
    {"forward", "forward pass and loss (s)", FieldKind::number, TANDEM_REPLICA_MEMBER(forward)},
    {"backward", "backward, launching its all-reduces on the way (s)", FieldKind::number,
     TANDEM_REPLICA_MEMBER(backward)},
    {"communication", "all-reduce not hidden behind any replica's backward (s)", FieldKind::number,
     TANDEM_REPLICA_MEMBER(communication)},
    {"optimizer", "unscale/check and the parameter update (s)", FieldKind::number,
     TANDEM_REPLICA_MEMBER(optimizer)},
    {"idle", "waiting: to start, for the slowest backward, for the step's end (s)",
     FieldKind::number, TANDEM_REPLICA_MEMBER(idle)},
    {"examples",
     "examples it computed (parameter-server workers, which go at their own pace; null "
     "where every replica computes its share of every step)",
     FieldKind::number, TANDEM_REPLICA_MEMBER(examples)},
    {"busy_fraction", "compute over wall time in the monitor's window (10 s)", FieldKind::number,
     [](const StepRecord& r, size_t i) {
       return i < r.busy_fractions.size() ? r.busy_fractions[i] : NAN;
     },
     [](StepRecord& r, size_t i, double v) {
       if (r.busy_fractions.size() <= i) r.busy_fractions.resize(i + 1, NAN);
       r.busy_fractions[i] = v;
     }},
};

#undef TANDEM_STEP_MEMBER
#undef TANDEM_REPLICA_MEMBER

std::string_view kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::integer:
      return "integer";
    case FieldKind::number:
      return "number";
    case FieldKind::boolean:
      return "boolean";
  }
  return "?";
}

}  // namespace

std::span<const StepField> step_fields() {
  return kStepFields;
}

std::span<const ReplicaField> replica_fields() {
  return kReplicaFields;
}

std::string step_schema_markdown() {
  std::string out = "| step field | type | meaning |\n|---|---|---|\n";
  for (const StepField& f : step_fields()) {
    out += "| `" + std::string(f.name) + "` | " + std::string(kind_name(f.kind)) + " | " +
           std::string(f.meaning) + " |\n";
  }
  out += "\n| `replicas[]` field | type | meaning |\n|---|---|---|\n";
  for (const ReplicaField& f : replica_fields()) {
    out += "| `" + std::string(f.name) + "` | " + std::string(kind_name(f.kind)) + " | " +
           std::string(f.meaning) + " |\n";
  }
  return out;
}

}  // namespace tandem::monitor
