#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tandem/base/atomic_file.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/statistics.h"
#include "tandem/base/utf8.h"
#include "tandem/base/warnings.h"

namespace tandem {
namespace {

TEST(Error, CheckMacrosNameConditionValuesAndLocation) {
  try {
    const int a = 3, b = 4;
    TANDEM_CHECK_EQ(a, b, "while testing");
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a == b"), std::string::npos) << what;
    EXPECT_NE(what.find("(3 vs 4)"), std::string::npos) << what;
    EXPECT_NE(what.find("while testing"), std::string::npos) << what;
    EXPECT_NE(what.find("base_test.cc"), std::string::npos) << what;
  }
  EXPECT_THROW(TANDEM_CHECK(1 + 1 == 3), Error);
  EXPECT_NO_THROW(TANDEM_CHECK(1 + 1 == 2, "fine"));
}

// What a byte-level model samples may not be UTF-8: escaped for the
// terminal, valid text left alone.
TEST(Utf8, InvalidBytesAreEscapedAndValidTextKept) {
  EXPECT_EQ(escape_invalid_utf8("In the beginning"), "In the beginning");
  EXPECT_EQ(escape_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(escape_invalid_utf8("a\xff"
                                "b\xc3"),
            "a\\xffb\\xc3");
  EXPECT_EQ(escape_invalid_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(utf8_sequence("\xf0\x9f\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence("\xc0\xaf", 0), 0u);  // overlong
  EXPECT_TRUE(is_utf8("caf\xc3\xa9 \xe2\x82\xac"));
  EXPECT_TRUE(is_utf8(""));
  EXPECT_FALSE(is_utf8("caf\xe9"));
  EXPECT_FALSE(is_utf8("ab\xc3"));  // cut short
}

// Two writers of one path at once (two runs sharing an output folder):
// each writes its own temporary, so both commit and the file is one of
// them whole (a shared PATH.tmp was truncated by the second and the first
// rename took it, failing the second's); one dropped leaves nothing behind.
TEST(AtomicFile, WritersOfOnePathDoNotShareATemporary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tandem_atomic_file_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "x.bin").string();
  {
    AtomicFile first(path, "test file"), second(path, "test file");
    AtomicFile dropped(path, "test file");
    first.write("first, whole");
    second.write("second");
    dropped.write("never committed");
    first.commit();
    second.commit();
  }
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::others_read, fs::perms::others_read);
  fs::remove_all(dir);
}

TEST(Error, TypedErrorsDeriveFromError) {
  EXPECT_THROW(TANDEM_THROW(InvalidArgument, "x ", 1), Error);
  EXPECT_THROW(TANDEM_THROW(IoError, "f"), IoError);
}

TEST(Random, SameSeedSameStreamDifferentSeedDifferentStream) {
  std::vector<float> a(1000), b(1000), c(1000);
  Generator(5).uniform(a.data(), 1000);
  Generator(5).uniform(b.data(), 1000);
  Generator(6).uniform(c.data(), 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Random, DrawsInPiecesEqualOneDraw) {
  Generator whole(9), pieces(9);
  std::vector<uint32_t> a(37), b(37);
  whole.bits(a.data(), 37);
  pieces.bits(b.data(), 10);
  pieces.bits(b.data() + 10, 27);
  EXPECT_EQ(a, b);
  EXPECT_EQ(random_bits_at(9, 12), a[12]);
}

TEST(Random, UniformAndNormalMoments) {
  constexpr int64_t n = 200000;
  std::vector<float> u(n), z(n);
  Generator g(1);
  g.uniform(u.data(), n, -2.0f, 2.0f);
  g.normal(z.data(), n, 1.0f, 3.0f);
  double su = 0, sz = 0, szz = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(u[i], -2.0f);
    ASSERT_LT(u[i], 2.0f);
    su += u[i];
    sz += z[i];
    szz += (z[i] - 1.0) * (z[i] - 1.0);
  }
  EXPECT_NEAR(su / n, 0.0, 0.02);
  EXPECT_NEAR(sz / n, 1.0, 0.03);
  EXPECT_NEAR(std::sqrt(szz / n), 3.0, 0.03);
}

TEST(Random, NextBelowStaysInRangeAndCoversIt) {
  Generator g(3);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = g.next_below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Parallel, RangesCoverEverythingOnceForManySizes) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 1009, 100000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
    }
  }
  set_num_threads(2);
}

TEST(Parallel, ExceptionReachesCaller) {
  set_num_threads(2);
  // From the last chunk: a worker thread's, or the caller's own where
  // parallel_for runs serially (sanitizer builds).
  EXPECT_THROW(parallel_for(1000, 1,
                            [](int64_t, int64_t end) {
                              if (end == 1000) TANDEM_THROW(InvalidArgument, "boom");
                            }),
               InvalidArgument);
  EXPECT_THROW(set_num_threads(0), InvalidArgument);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(Statistics, MedianOfOddEvenAndNoValues) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({}), 0.0);
}

TEST(Warnings, GoToTheInstalledSinkFromAnyThreadAndThenToStderrAgain) {
  std::vector<std::string> seen;
  {
    WarningSinkScope scope([&](const std::string& m) { seen.push_back(m); });
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([t] {
        for (int i = 0; i < 100; ++i) warn("thread " + std::to_string(t));
      });
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(seen.size(), 400u);
  EXPECT_EQ(seen.front().rfind("thread ", 0), 0u);
  testing::internal::CaptureStderr();
  warn("a worker was lost");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tandem: warning: a worker was lost\n");
  EXPECT_EQ(seen.size(), 400u);  // the scope's sink is gone
}

}  // namespace
}  // namespace tandem
