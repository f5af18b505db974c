#pragma once
// TensorBoard event files: what tf.summary and PyTorch's SummaryWriter
// write and TensorBoard reads. A file is a sequence of TFRecord records
// (u64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of
// the bytes), each a serialised tensorflow.Event; the first carries
// file_version "brain.Event:2", the others a Summary of scalar values
// (Summary.Value{tag, simple_value}). Each write is flushed, so a killed
// run's file is readable up to its last whole record.

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tandem::interop {

class EventWriter {
 public:
  // Creates `dir` if needed and a new file in it named as TensorFlow names
  // them: events.out.tfevents.SECONDS.HOSTNAME.PID.0. Throws IoError.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event at `step` holding the scalars (tag, value); wall_time is the
  // current time. Throws IoError when the file cannot be written.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// The protobuf bytes of a tensorflow.Event (exposed for tests): wall_time
// (field 1, double), step (2, int64), file_version (3, string) when not
// empty, else a Summary (5) of simple_value scalars.
std::string encode_event(double wall_time, int64_t step, const std::string& file_version,
                         const std::vector<std::pair<std::string, double>>& scalars);

}  // namespace tandem::interop
