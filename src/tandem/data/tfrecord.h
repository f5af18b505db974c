#pragma once
// TFRecord files: a sequence of records, each framed as
//   u64 length | u32 masked CRC-32C of the length | data | u32 masked CRC-32C of the data
// (little-endian), optionally inside a GZIP or ZLIB stream. Every CRC is
// checked; damage is reported with the file name and the record's index.

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Guesses a file's compression from its first bytes (gzip: 1f 8b; zlib: a
// valid zlib header whose first record length would be implausible raw).
Compression detect_compression(const std::string& path);

// Records claiming more bytes than this (16 GiB) are taken for a corrupt length.
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 34;

class TFRecordReader {
 public:
  // Throws IoError when the file cannot be opened.
  TFRecordReader(const std::string& path, Compression compression);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // The next record's bytes, or nullopt at the end of the file. Throws
  // IoError for a bad length or data CRC, a length above kMaxRecordBytes or,
  // in an uncompressed file, above what the file has left (checked before
  // the record's buffer is allocated), or a truncated record. Compressed
  // records are read in chunks, the buffer growing as data arrives.
  std::optional<std::string> next();
  int64_t records_read() const { return index_; }

 private:
  class Stream;
  std::unique_ptr<Stream> stream_;
  std::string path_;
  int64_t index_ = 0;
};

// The records of an uncompressed TFRecord file, counted from their headers
// (lengths and length CRCs, without reading the data); -1 when the file is
// missing, compressed or its framing is damaged (reading it reports why).
int64_t count_tfrecord_records(const std::string& path);

// Writes records as a TFRecord file (for tests and exports).
void write_tfrecord(const std::string& path, const std::vector<std::string>& records,
                    Compression compression = Compression::none);

}  // namespace tandem::data
