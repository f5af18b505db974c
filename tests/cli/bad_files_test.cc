// `tandem data inspect` on files whose headers claim far more than they hold
// (IDX dimensions, TFRecord lengths, raw and compressed): one error line, a
// non-zero status, no "internal error", quickly, and a peak RSS of the
// command under 100 MB, because nothing is allocated from the claim.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/cli.h"
#include "support/test_files.h"
#include "tandem/data/crc32c.h"
#include "tandem/data/tfrecord.h"

namespace {

using tandem::testing::MeasuredResult;
using tandem::testing::run_measured;
using tandem::testing::tmp;
using tandem::testing::write_bytes;
using tandem::testing::write_gz;

std::string idx_header(unsigned char type, const std::vector<uint32_t>& dims) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((d >> shift) & 0xFF);
  }
  return out;
}

std::string record_header(uint64_t length) {
  std::string header(12, '\0');
  std::memcpy(header.data(), &length, 8);
  const uint32_t crc = tandem::data::masked_crc32c(header.data(), 8);
  std::memcpy(header.data() + 8, &crc, 4);
  return header;
}

// data inspect on path fails with one line holding `needle`, fast and small.
void expect_cheap_rejection(const std::string& path, const std::string& needle) {
  SCOPED_TRACE(path);
  const auto start = std::chrono::steady_clock::now();
  const MeasuredResult r = run_measured("data inspect " + path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.status, 0) << r.errors;
  EXPECT_EQ(r.errors.rfind("tandem: error: ", 0), 0u) << r.errors;
  EXPECT_EQ(r.errors.find("internal error"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find(needle), std::string::npos) << r.errors;
  EXPECT_EQ(r.errors.find('\n'), r.errors.size() - 1) << "not one line: " << r.errors;
  EXPECT_LT(r.peak_rss_bytes, int64_t{100} << 20) << r.errors;
  // The command's start-up included; the rejection itself takes microseconds.
  EXPECT_LT(seconds, 5.0) << r.errors;
}

TEST(CliBadFiles, DataInspectRefusesIdxClaimsWithoutAllocatingThem) {
  // 100 bytes claiming 4000 x 1000 x 1000 u8 (4 GB): raw and gzipped.
  std::string file = idx_header(0x08, {4000, 1000, 1000});
  file.resize(100, '\x07');
  const std::string raw = tmp("cli-bad-files-claims.idx");
  write_bytes(raw, file);
  expect_cheap_rejection(raw, "only 84 bytes follow the header");
  const std::string gz = tmp("cli-bad-files-claims.idx.gz");
  write_gz(gz, file);
  expect_cheap_rejection(gz, "the data ends after 84 bytes");
  // 2^62 bytes and past int64: beyond kMaxIdxBytes.
  write_bytes(raw, idx_header(0x08, {1u << 31, 1u << 31}) + "data");
  expect_cheap_rejection(raw, "kMaxIdxBytes");
  write_gz(gz, idx_header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}) + "data");
  expect_cheap_rejection(gz, "kMaxIdxBytes");
}

TEST(CliBadFiles, DataInspectRefusesTfrecordLengthsWithoutAllocatingThem) {
  const std::string tail(50, 'x');
  const std::string raw = tmp("cli-bad-files-claims.tfrecord");
  write_bytes(raw, record_header(tandem::data::kMaxRecordBytes) + tail);
  expect_cheap_rejection(raw, "only 50 bytes are left in the file");
  write_bytes(raw, record_header(uint64_t{1} << 62) + tail);
  expect_cheap_rejection(raw, "kMaxRecordBytes");
  const std::string gz = tmp("cli-bad-files-claims.tfrecord.gz");
  write_gz(gz, record_header(tandem::data::kMaxRecordBytes) + tail);
  expect_cheap_rejection(gz, "record 0 is truncated (50 of 17179869188 bytes");
}

}  // namespace
