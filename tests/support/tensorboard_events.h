#pragma once
// A reader of TensorBoard event files for tests, written from the protobuf
// wire format and tensorflow.Event's field numbers, independent of
// interop/tensorboard.cc's encoder: the records through data::TFRecordReader
// (which checks both CRCs), each decoded field by field.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/tfrecord.h"

namespace tandem::testing {

struct DecodedEvent {
  double wall_time = 0.0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
};

class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; at_ < bytes_.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(bytes_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "varint runs past the end";
    return v;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (at_ + sizeof(T) > bytes_.size()) {
      ADD_FAILURE() << "fixed field runs past the end";
      at_ = bytes_.size();
      return v;
    }
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (at_ + n > bytes_.size()) {
      ADD_FAILURE() << "length-delimited field runs past the end";
      at_ = bytes_.size();
      return {};
    }
    const std::string_view out = bytes_.substr(at_, n);
    at_ += n;
    return out;
  }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

inline DecodedEvent decode_event(std::string_view bytes) {
  DecodedEvent e;
  ProtoReader r(bytes);
  while (!r.done()) {
    const uint64_t tag = r.varint();
    switch (tag) {
      case (1 << 3) | 1:
        e.wall_time = r.fixed<double>();
        break;
      case (2 << 3) | 0:
        e.step = static_cast<int64_t>(r.varint());
        break;
      case (3 << 3) | 2:
        e.file_version = std::string(r.bytes());
        break;
      case (5 << 3) | 2: {
        ProtoReader summary(r.bytes());
        while (!summary.done()) {
          EXPECT_EQ(summary.varint(), (1u << 3) | 2) << "Summary.value";
          ProtoReader value(summary.bytes());
          std::pair<std::string, float> scalar;
          while (!value.done()) {
            const uint64_t field = value.varint();
            if (field == ((1 << 3) | 2)) {
              scalar.first = std::string(value.bytes());
            } else if (field == ((2 << 3) | 5)) {
              scalar.second = value.fixed<float>();
            } else {
              ADD_FAILURE() << "unexpected Summary.Value field tag " << field;
              return e;
            }
          }
          e.scalars.push_back(std::move(scalar));
        }
        break;
      }
      default:
        ADD_FAILURE() << "unexpected Event field tag " << tag;
        return e;
    }
  }
  return e;
}

// Every event of the one event file in `dir`.
inline std::vector<DecodedEvent> read_events(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  std::vector<DecodedEvent> out;
  if (files.empty()) return out;
  data::TFRecordReader reader(files[0], data::Compression::none);
  while (auto record = reader.next()) out.push_back(decode_event(*record));
  return out;
}

}  // namespace tandem::testing
