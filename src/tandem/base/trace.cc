#include "tandem/base/trace.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "tandem/base/error.h"

namespace tandem::trace {
namespace {

struct ThreadBuffer {
  std::mutex mutex;  // the owner thread and take() only
  int tid = 0;
  std::string name;
  std::vector<Event> events;
  bool ended = false;  // the thread has exited: drop the buffer once drained
};

std::atomic<bool> tracing{false};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // until drained after their thread ends
  int next_tid = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives threads that record during exit
  return *r;
}

// Owned by its thread; marks the buffer ended when the thread exits, so
// that take() can forget threads that are gone (trainers and communicators
// come and go in one process).
struct ThreadHolder {
  std::shared_ptr<ThreadBuffer> buffer;
  ~ThreadHolder() {
    std::lock_guard<std::mutex> lock(buffer->mutex);
    buffer->ended = true;
  }
};

ThreadBuffer& this_thread_buffer() {
  thread_local ThreadHolder holder{[] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    b->tid = ++r.next_tid;
    b->name = "thread " + std::to_string(b->tid);
    r.buffers.push_back(b);
    return b;
  }()};
  return *holder.buffer;
}

// JSON string contents: names are literals or thread names, but escape anyway.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", c);
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool enabled() {
  return tracing.load(std::memory_order_relaxed);
}

void set_enabled(bool on) {
  tracing.store(on, std::memory_order_relaxed);
}

void set_thread_name(std::string name) {
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.name = std::move(name);
}

void record(const char* name, const char* category, Clock::time_point start, Clock::time_point end,
            const char* arg_name, int64_t arg) {
  if (!enabled()) return;
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.events.push_back({name, category, start, end, arg_name, arg});
}

std::vector<ThreadEvents> take() {
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    buffers = r.buffers;
  }
  std::vector<ThreadEvents> out;
  std::vector<const ThreadBuffer*> finished;
  for (const auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    if (b->ended && b->events.empty()) {
      finished.push_back(b.get());
      continue;
    }
    out.push_back({b->tid, b->name, std::move(b->events)});
    b->events.clear();
    if (b->ended) finished.push_back(b.get());
  }
  if (!finished.empty()) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::erase_if(r.buffers, [&](const std::shared_ptr<ThreadBuffer>& b) {
      return std::find(finished.begin(), finished.end(), b.get()) != finished.end();
    });
  }
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<ThreadEvents>& threads,
                        Clock::time_point origin) {
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) TANDEM_THROW(IoError, "cannot write trace file ", path);
  const auto micros = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  bool first = true;
  const auto separator = [&] {
    if (!first) std::fputs(",\n", f);
    first = false;
  };
  for (const ThreadEvents& t : threads) {
    separator();
    std::fprintf(f,
                 "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, "
                 "\"args\": {\"name\": \"%s\"}}",
                 t.tid, escaped(t.name).c_str());
    for (const Event& e : t.events) {
      separator();
      std::fprintf(f,
                   "{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": 1, \"tid\": %d, "
                   "\"ts\": %.3f, \"dur\": %.3f",
                   escaped(e.name).c_str(), escaped(e.category).c_str(), t.tid, micros(e.start),
                   std::max(0.0, micros(e.end) - micros(e.start)));
      if (e.arg_name != nullptr) {
        std::fprintf(f, ", \"args\": {\"%s\": %lld}", escaped(e.arg_name).c_str(),
                     static_cast<long long>(e.arg));
      }
      std::fputs("}", f);
    }
  }
  std::fputs("\n]}\n", f);
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  if (!ok || std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    TANDEM_THROW(IoError, "cannot write trace file ", path);
  }
}

}  // namespace tandem::trace
