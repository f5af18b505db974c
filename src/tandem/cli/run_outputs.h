#pragma once
// Where a `tandem train` run writes: its default run directory, and the
// steps its trace covers.

#include <cstdint>
#include <string>
#include <utility>

namespace tandem::cli {

// runs/MODEL-DATE-TIME. A run started alone claims it by creating it (two
// runs started in one second shared one directory: one checkpoint, two
// runs' metrics interleaved), taking MODEL-DATE-TIME-2, -3, ... when taken.
// Under a launcher every process names it alike and only the chief writes.
// Throws IoError when runs/ cannot hold it.
std::string default_output_dir(const std::string& model);

// --trace-steps: "FIRST:LAST" (1-based global steps, inclusive) or one
// step; (0, 0) for none. Throws InvalidArgument for anything else.
std::pair<int64_t, int64_t> parse_trace_steps(const std::string& text);

}  // namespace tandem::cli
