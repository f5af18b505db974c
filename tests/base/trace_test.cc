#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/base/trace.h"

namespace tandem {
namespace {

TEST(Trace, OffRecordsNothing) {
  trace::set_enabled(false);
  trace::take();
  { trace::Span span("ignored", "test"); }
  trace::record("ignored too", "test", trace::Clock::now(), trace::Clock::now());
  for (const auto& t : trace::take()) EXPECT_TRUE(t.events.empty()) << t.name;
}

TEST(Trace, WritesOneNamedTrackPerThreadAsChromeTraceJson) {
  trace::take();
  trace::set_enabled(true);
  const auto origin = trace::Clock::now();
  auto work = [](std::string name, int spans) {
    trace::set_thread_name(std::move(name));
    for (int i = 0; i < spans; ++i) {
      trace::Span span("step \"part\"", "test");  // a quote must be escaped
      span.set_arg("bytes", 1000 + i);
    }
  };
  std::thread a(work, "replica 0", 3), b(work, "replica 1", 2);
  a.join();
  b.join();
  trace::set_enabled(false);
  const auto threads = trace::take();
  const std::string path = std::string(TANDEM_TEST_TMPDIR) + "/trace_test.json";
  trace::write_chrome_trace(path, threads, origin);

  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);  // throws when not valid JSON
  std::map<int, std::string> track_names;
  std::map<std::string, int> spans_per_track;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M") {
      EXPECT_EQ(e.at("name"), "thread_name");
      track_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    }
  }
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    EXPECT_EQ(e.at("name"), "step \"part\"");
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_GE(e.at("args").at("bytes").get<int>(), 1000);
    ++spans_per_track[track_names.at(e.at("tid").get<int>())];
  }
  EXPECT_EQ(spans_per_track["replica 0"], 3);
  EXPECT_EQ(spans_per_track["replica 1"], 2);
  // Taken events are gone.
  for (const auto& t : trace::take()) EXPECT_TRUE(t.events.empty());
}

TEST(Trace, UnwritablePathIsAnIoError) {
  EXPECT_THROW(trace::write_chrome_trace("/nonexistent-dir/trace.json", {}, trace::Clock::now()),
               IoError);
}

}  // namespace
}  // namespace tandem
