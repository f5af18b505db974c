// The process records ranks exchange for their error reports: a host name
// survives the round trip, a long one is cut rather than overflowing, and
// bytes from another process without a terminator are never read past.
#include "tandem/comm/detail/peer_process.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace tandem::comm::detail {
namespace {

TEST(PeerProcess, RecordRoundTripKeepsHostAndPid) {
  const PeerProcess me = this_process();
  EXPECT_GT(me.pid, 0);
  const PeerProcess back = from_record(to_record(me));
  EXPECT_EQ(back.host, me.host);
  EXPECT_EQ(back.pid, me.pid);
  EXPECT_EQ(from_record(to_record({"h1", 42})).host, "h1");
}

TEST(PeerProcess, LongHostNamesAreCutAndUnterminatedBytesAreNotOverread) {
  const std::string long_name(500, 'x');
  const PeerProcess back = from_record(to_record({long_name, 7}));
  EXPECT_EQ(back.host, std::string(kHostNameBytes - 1, 'x'));
  PeerRecord garbage;
  std::memset(garbage.host, 'y', sizeof garbage.host);  // no terminator
  EXPECT_EQ(from_record(garbage).host, std::string(kHostNameBytes, 'y'));
}

TEST(PeerProcess, StateOfThisProcessAndOfOneThatIsGone) {
  EXPECT_EQ(process_state(this_process().pid), "is running (busy outside the collectives)");
  EXPECT_EQ(process_state(-5), "has exited");
}

}  // namespace
}  // namespace tandem::comm::detail
