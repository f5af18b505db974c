#pragma once
// The files a training run keeps in its output directory, named in one
// place: the Trainer's checkpoint, summary.json, the monitor's metrics,
// trace and TensorBoard event files, and `tandem report`'s page. Every
// writer and reader (the Trainer, the monitor, the report, the commands
// that resume, evaluate, export or generate from a run, the Python
// package) takes the names from here.

#include <filesystem>
#include <string>
#include <utility>

namespace tandem::train {

class RunDirectory {
 public:
  explicit RunDirectory(std::filesystem::path root) : root_(std::move(root)) {}

  const std::filesystem::path& root() const { return root_; }
  std::string checkpoint() const { return file("checkpoint.tckpt"); }
  std::string summary() const { return file("summary.json"); }
  std::string metrics() const { return file("metrics.jsonl"); }
  std::string trace() const { return file("trace.json"); }
  std::string tensorboard() const { return file("tensorboard"); }  // a directory
  std::string report() const { return file("report.html"); }

 private:
  std::string file(const char* name) const { return (root_ / name).string(); }

  std::filesystem::path root_;
};

}  // namespace tandem::train
