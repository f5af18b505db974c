#pragma once
// A low-overhead recorder of timed spans for the Chrome trace event format
// (viewable in Perfetto or chrome://tracing). Off by default; while off a
// Span costs one relaxed atomic load. While on, each thread appends to its
// own buffer (an uncontended per-thread mutex guards it against take()), so
// replica, communication and pipeline threads never wait on each other.
// Names and categories must be string literals (stored as pointers).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::trace {

using Clock = std::chrono::steady_clock;

struct Event {
  const char* name = nullptr;
  const char* category = nullptr;
  Clock::time_point start;
  Clock::time_point end;
  const char* arg_name = nullptr;  // one optional integer argument (e.g. "bytes")
  int64_t arg = 0;
};

struct ThreadEvents {
  int tid = 0;       // stable per thread, in order of first use
  std::string name;  // set_thread_name(), or "thread N"
  std::vector<Event> events;
};

bool enabled();
void set_enabled(bool on);

// Names the calling thread's track ("replica 0", "comm", "main").
void set_thread_name(std::string name);

// Records a finished span on the calling thread (when enabled).
void record(const char* name, const char* category, Clock::time_point start, Clock::time_point end,
            const char* arg_name = nullptr, int64_t arg = 0);

// Records from construction to destruction (when enabled at construction).
class Span {
 public:
  Span(const char* name, const char* category) : name_(name), category_(category) {
    if (enabled()) start_ = Clock::now(), active_ = true;
  }
  ~Span() {
    if (active_) record(name_, category_, start_, Clock::now(), arg_name_, arg_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void set_arg(const char* name, int64_t value) { arg_name_ = name, arg_ = value; }

 private:
  const char* name_;
  const char* category_;
  const char* arg_name_ = nullptr;
  int64_t arg_ = 0;
  Clock::time_point start_;
  bool active_ = false;
};

// Moves out every thread's events recorded so far (live threads with none
// are listed too, so that their tracks keep their names; threads that have
// exited are forgotten once their events are taken).
std::vector<ThreadEvents> take();

// Writes events as a Chrome trace JSON object ({"traceEvents": [...]}), with
// times in microseconds relative to `origin`, one track (tid) per thread and
// a thread_name metadata event per track. Throws IoError when the file
// cannot be written.
void write_chrome_trace(const std::string& path, const std::vector<ThreadEvents>& threads,
                        Clock::time_point origin);

}  // namespace tandem::trace
