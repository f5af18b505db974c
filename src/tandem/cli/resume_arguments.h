#pragma once
// tandem train's settings across a resume. A run records the arguments it
// was started with (its checkpoint's "arguments"); `--resume` takes every
// setting from them, so that a resumed run is the run that was started,
// whatever the new command line leaves out. The new command line may change
// only what leaves the trained model's path alone: --epochs (the cosine
// schedule's rule: stretched over the new total), the output and
// monitoring flags, the strategy, devices and threads (which resume
// exactly), timeouts and input parallelism. Any other flag is refused
// unless it repeats the recorded value. --quiet, --trace-steps,
// --stop-after-epochs, --init-from and --non-strict belong to one
// invocation and are not taken from the recorded arguments; a resume into
// another --strategy does not take the layout's and update rule's flags
// (--devices, --threads, --ps, --max-staleness, ...) either.

#include <CLI/CLI.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {

// "--name=value" for each option given to `command` (a parsed subcommand),
// in the order the options were registered, leaving out --resume and
// --output: what a run records.
std::vector<std::string> given_arguments(const CLI::App& command);

// The arguments a run recorded in its checkpoint's metadata ("arguments"),
// or nothing for a run that recorded none (older, or a program's). IoError
// naming `checkpoint` when they are not a JSON list of strings.
std::optional<std::vector<std::string>> recorded_arguments(
    const std::map<std::string, std::string>& metadata, const std::string& checkpoint);

// The arguments a resumed run continues with: those given to `recorded`
// (the run's recorded arguments, parsed into a train command), with the
// options that may change replaced by those given to `now` (this command
// line, parsed). InvalidArgument naming the flag, the run's value and the
// new one for an option that may not change and was given another value.
std::vector<std::string> resume_arguments(const CLI::App& now, const CLI::App& recorded);

}  // namespace tandem::cli
