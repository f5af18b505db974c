#include "tandem/interop/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/base/host_name.h"
#include "tandem/data/crc32c.h"

namespace tandem::interop {
namespace {

// Protobuf's wire format, the three field kinds an Event needs.
enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_tag(std::string& out, int field, WireType type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | type);
}

template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as protobuf's fixed types
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_event(double wall_time, int64_t step, const std::string& file_version,
                         const std::vector<std::pair<std::string, double>>& scalars) {
  std::string event;
  put_tag(event, 1, kFixed64);
  put_fixed<double>(event, wall_time);
  if (step != 0) {
    put_tag(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));
  }
  if (!file_version.empty()) {
    put_bytes(event, 3, file_version);
    return event;
  }
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, kFixed32);
    put_fixed<float>(v, static_cast<float>(value));
    put_bytes(summary, 1, v);
  }
  put_bytes(event, 5, summary);
  return event;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    TANDEM_THROW(IoError, "cannot create the TensorBoard directory '", dir, "': ", error.message());
  const std::string host = host_name(/*fallback=*/"localhost");
  const auto seconds = static_cast<int64_t>(now_seconds());
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." +
                                         host + "." + std::to_string(::getpid()) + ".0"))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr)
    TANDEM_THROW(IoError, "cannot create '", path_, "': ", std::strerror(errno));
  write_record(encode_event(now_seconds(), 0, "brain.Event:2", {}));
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::pair<std::string, double>> finite;
  for (const auto& v : values)
    if (std::isfinite(v.second)) finite.push_back(v);
  if (!finite.empty()) write_record(encode_event(now_seconds(), step, "", finite));
}

void EventWriter::write_record(const std::string& event) {
  std::string record;
  const uint64_t length = event.size();
  put_fixed<uint64_t>(record, length);
  put_fixed<uint32_t>(record, data::masked_crc32c(&length, sizeof(length)));
  record += event;
  put_fixed<uint32_t>(record, data::masked_crc32c(event.data(), event.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    TANDEM_THROW(IoError, "cannot write '", path_, "': ", std::strerror(errno));
  }
}

}  // namespace tandem::interop
