#pragma once
// Warnings the library raises while it runs and goes on (a parameter-server
// worker lost, a stray connection ignored): the program that embeds it
// decides where they go. The default sink writes "tandem: warning: <message>"
// to stderr, which the command line and Python keep; a test or an
// embedding program installs its own. Warnings that belong to a result
// (a report's, a monitor's) are returned with it instead.

#include <functional>
#include <string>

namespace tandem {

using WarningSink = std::function<void(const std::string& message)>;

// Installs `sink` (an empty one: the default) for every thread; returns the
// one it replaces. A sink may be called from any thread, one call at a time.
WarningSink set_warning_sink(WarningSink sink);

// Hands `message` (without the "tandem: warning: " prefix) to the sink.
void warn(const std::string& message);

// Installs a sink for a scope and restores the previous one.
class WarningSinkScope {
 public:
  explicit WarningSinkScope(WarningSink sink) : previous_(set_warning_sink(std::move(sink))) {}
  ~WarningSinkScope() { set_warning_sink(std::move(previous_)); }
  WarningSinkScope(const WarningSinkScope&) = delete;
  WarningSinkScope& operator=(const WarningSinkScope&) = delete;

 private:
  WarningSink previous_;
};

}  // namespace tandem
