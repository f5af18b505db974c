// The rendezvous store: values and counters across clients, waits that end
// when another process sets the key or at their timeout, and clear errors
// for a lost server, a refused connection, malformed input and bad
// addresses.
#include "tandem/comm/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/base/host_name.h"
#include "tandem/comm/detail/tcp.h"

namespace tandem::comm {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Store> client(const StoreServer& server) {
  return connect_store("127.0.0.1", server.port(), 5s, 5s);
}

TEST(Store, ValuesAndCountersAreSharedBetweenClients) {
  StoreServer server;
  auto a = client(server), b = client(server);
  a->set("k", std::string("\0bytes\xff", 7));
  EXPECT_EQ(b->get("k", 1s), std::string("\0bytes\xff", 7));
  EXPECT_EQ(b->try_get("absent"), std::nullopt);
  a->set("k", "");
  EXPECT_EQ(b->try_get("k"), "");
  EXPECT_EQ(a->add("n", 1), 1);
  EXPECT_EQ(b->add("n", 5), 6);
  EXPECT_EQ(a->add("n", -2), 4);
  EXPECT_EQ(b->get("n", 1s), "4");
  EXPECT_EQ(a->local_address(), "127.0.0.1");
}

TEST(Store, GetWaitsForAnotherClientsSet) {
  StoreServer server;
  auto waiter = client(server), setter = client(server);
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    setter->set("late", "here");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(waiter->get("late", 10s), "here");
  later.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Store, CountersAreAtomicAcrossThreads) {
  StoreServer server;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto c = client(server);
      for (int i = 0; i < 50; ++i) c->add("count", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(client(server)->add("count", 0), 200);
}

TEST(Store, GetTimesOutNamingTheKey) {
  StoreServer server;
  auto c = client(server);
  const auto start = std::chrono::steady_clock::now();
  try {
    c->get("never", 300ms);
    FAIL() << "expected Timeout";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The connection stays usable after a wait that ran out.
  c->set("after", "ok");
  EXPECT_EQ(c->get("after", 1s), "ok");
}

TEST(Store, AddToAValueThatIsNotACounterIsRefused) {
  StoreServer server;
  auto c = client(server);
  c->set("text", "abc");
  EXPECT_THROW(c->add("text", 1), InvalidArgument);
  EXPECT_EQ(c->add("fresh", 2), 2);
}

TEST(Store, LostServerEndsWaitsWithPeerFailed) {
  auto server = std::make_unique<StoreServer>();
  auto c = client(*server);
  std::thread stop([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(c->get("never", 30s), Error);
  stop.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  try {
    c->set("x", "y");
    FAIL() << "expected PeerFailed";
  } catch (const PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous store at 127.0.0.1"), std::string::npos)
        << e.what();
  }
}

TEST(Store, NothingListeningIsAClearErrorAfterTheConnectTimeout) {
  int port = 0;
  {
    StoreServer gone;
    port = gone.port();
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    connect_store("127.0.0.1", port, 500ms);
    FAIL() << "expected PeerFailed";
  } catch (const PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the rendezvous store"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Store, MalformedClientIsDroppedAndOthersAreServed) {
  StoreServer server;
  const int fd = detail::connect_to({"127.0.0.1"}, server.port(), 5, "the test's store");
  const char garbage[32] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  detail::send_all(fd, garbage, sizeof garbage, detail::TcpClock::now() + 5s, "the store");
  char byte = 0;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // the server hung up
  ::close(fd);
  auto c = client(server);
  c->set("still", "serving");
  EXPECT_EQ(c->get("still", 1s), "serving");
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

TEST(Store, ClosedConnectionsGiveBackTheirDescriptors) {
  // Each kept its descriptor and thread until the server ended: a long
  // elastic job ran out of descriptors and the store stopped answering.
  StoreServer server;
  client(server)->set("warm", "up");
  std::this_thread::sleep_for(500ms);
  const size_t before = open_descriptors();
  for (int i = 0; i < 200; ++i) client(server)->set("k", "v");
  size_t after = open_descriptors();
  for (int wait = 0; wait < 50 && after > before + 10; ++wait) {
    std::this_thread::sleep_for(100ms);
    after = open_descriptors();
  }
  EXPECT_LE(after, before + 10) << "descriptors still open after 200 closed connections";
  EXPECT_EQ(client(server)->try_get("k"), "v");
}

TEST(Store, CountersThatWouldOverflowAreRefused) {
  StoreServer server;
  auto c = client(server);
  EXPECT_EQ(c->add("n", std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
  EXPECT_THROW(c->add("n", 1), InvalidArgument);
  EXPECT_EQ(c->add("n", -1), std::numeric_limits<int64_t>::max() - 1);
}

TEST(Store, OversizedKeysAreRefusedBeforeSending) {
  StoreServer server;
  auto c = client(server);
  EXPECT_THROW(c->set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v"), InvalidArgument);
  c->set("ok", "v");  // the connection is intact
  EXPECT_EQ(c->get("ok", 1s), "v");
}

// The address a client gives its peers (gloo listens on it): a loopback
// one only when the store was named by a loopback name. The machine's own
// name resolving to loopback (Debian's /etc/hosts entry, 127.0.1.1) sent
// the other hosts' ranks to themselves.
TEST(Store, AdvertisesAnAddressOtherHostsCanReach) {
  StoreServer server(0);
  EXPECT_EQ(connect_store("127.0.0.1", server.port(), 5s)->local_address(), "127.0.0.1");
  EXPECT_EQ(connect_store("localhost", server.port(), 5s)->local_address(), "127.0.0.1");
  const std::vector<std::string> own = detail::host_addresses();
  const std::vector<std::string> named = detail::resolve_host(host_name());
  if (own.front().starts_with("127.") || !named.front().starts_with("127."))
    GTEST_SKIP() << "this host's name does not resolve to loopback, or it has no other address";
  EXPECT_EQ(connect_store(host_name(), server.port(), 5s)->local_address(), own.front());
}

TEST(Store, BadAddressesAreRefused) {
  EXPECT_EQ(parse_host_port("node0:29400", "--rdzv"), std::make_pair(std::string("node0"), 29400));
  EXPECT_EQ(parse_host_port("10.0.0.1:1", "--rdzv"), std::make_pair(std::string("10.0.0.1"), 1));
  for (const char* bad : {"node0", "node0:", ":29400", "node0:0", "node0:65536", "node0:12x", ""}) {
    EXPECT_THROW(parse_host_port(bad, "--rdzv"), InvalidArgument) << bad;
  }
  EXPECT_THROW(connect_store("no-such-host.invalid", 29400, 100ms), InvalidArgument);
  EXPECT_THROW(connect_store("127.0.0.1", 0, 100ms), InvalidArgument);
  EXPECT_THROW(StoreServer(70000), InvalidArgument);
}

}  // namespace
}  // namespace tandem::comm
