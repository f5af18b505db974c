#include "tandem/comm/store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/comm/detail/tcp.h"

namespace tandem::comm {
namespace {

using detail::TcpClock;
using std::chrono::milliseconds;

// A request: op (u8), key length (u32), value length (u64), a number (i64:
// the wait in milliseconds of a get, the delta of an add), then the key and
// the value. An answer: status (u8), length (u64), the bytes.
enum class StoreOp : uint8_t { set = 1, get = 2, try_get = 3, add = 4 };
enum class StoreStatus : uint8_t { ok = 0, missing = 1 };
constexpr size_t kRequestHeader = 1 + 4 + 8 + 8;
constexpr size_t kAnswerHeader = 1 + 8;
// Values arrive in pieces of this size, so that a length a client merely
// claims allocates nothing.
constexpr uint64_t kPiece = uint64_t{16} << 20;
// An idle connection is kept this long between requests.
constexpr auto kIdleLimit = std::chrono::hours(24 * 30);

template <typename T>
T read_field(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

template <typename T>
void append_field(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string receive_bytes(int fd, uint64_t n, TcpClock::time_point deadline,
                          std::string_view peer) {
  std::string bytes;
  while (bytes.size() < n) {
    const size_t done = bytes.size();
    bytes.resize(done + static_cast<size_t>(std::min(kPiece, n - done)));
    detail::receive_exactly(fd, bytes.data() + done, bytes.size() - done, deadline, peer);
  }
  return bytes;
}

int64_t parse_count(const std::string& text, const std::string& key) {
  const std::optional<int64_t> v = parse_number<int64_t>(text);
  if (!v) {
    TANDEM_THROW(InvalidArgument, "store key '", key, "' holds '", text.substr(0, 40),
                 "', not a counter");
  }
  return *v;
}

}  // namespace

Store::~Store() = default;

namespace {

struct Connection {
  int fd;
  std::thread thread;  // serve(fd)
  std::shared_ptr<std::atomic<bool>> finished;
};

}  // namespace

struct StoreServer::State {
  explicit State(int port) : listener("the rendezvous store", port) {}

  // Answers one connection's requests until it closes or the server stops.
  void serve(int fd);
  std::string answer(StoreOp op, const std::string& key, std::string value, int64_t number);
  // Joins the threads of the connections that ended and closes their
  // descriptors (a long elastic job connects thousands of times). Under mutex.
  void reap_finished();

  detail::TcpListener listener;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::string, std::less<>> values;
  bool stopping = false;
  std::vector<Connection> connections;  // open, or finished and not yet reaped
  std::thread acceptor;
};

std::string StoreServer::State::answer(StoreOp op, const std::string& key, std::string value,
                                       int64_t number) {
  std::string out;
  const auto reply = [&](StoreStatus status, std::string_view bytes) {
    append_field(out, static_cast<uint8_t>(status));
    append_field(out, static_cast<uint64_t>(bytes.size()));
    out.append(bytes);
  };
  std::unique_lock lock(mutex);
  switch (op) {
    case StoreOp::set:
      values[key] = std::move(value);
      changed.notify_all();
      reply(StoreStatus::ok, {});
      break;
    case StoreOp::get: {
      const auto deadline =
          TcpClock::now() + milliseconds(std::clamp<int64_t>(number, 0, 86'400'000));
      const bool found = changed.wait_until(
          lock, deadline, [&] { return stopping || values.find(key) != values.end(); });
      const auto it = values.find(key);
      if (found && it != values.end()) {
        reply(StoreStatus::ok, it->second);
      } else {
        reply(StoreStatus::missing, {});
      }
      break;
    }
    case StoreOp::try_get: {
      const auto it = values.find(key);
      if (it != values.end()) {
        reply(StoreStatus::ok, it->second);
      } else {
        reply(StoreStatus::missing, {});
      }
      break;
    }
    case StoreOp::add: {
      auto& text = values[key];
      int64_t count = 0;
      try {
        count = text.empty() ? 0 : parse_count(text, key);
      } catch (const Error& e) {
        reply(StoreStatus::missing, e.what());
        break;
      }
      if (__builtin_add_overflow(count, number, &count)) {
        reply(StoreStatus::missing, "store counter '" + key + "' would overflow");
        break;
      }
      text = std::to_string(count);
      changed.notify_all();
      reply(StoreStatus::ok, text);
      break;
    }
  }
  return out;
}

void StoreServer::State::serve(int fd) {
  constexpr std::string_view kClient = "a rendezvous store client";
  try {
    for (;;) {
      char header[kRequestHeader];
      detail::receive_exactly(fd, header, sizeof header, TcpClock::now() + kIdleLimit, kClient);
      const char* p = header;
      const auto op = read_field<uint8_t>(p);
      const auto key_bytes = read_field<uint32_t>(p);
      const auto value_bytes = read_field<uint64_t>(p);
      const auto number = read_field<int64_t>(p);
      // Something that is not a tandem store client: drop it.
      if (op < static_cast<uint8_t>(StoreOp::set) || op > static_cast<uint8_t>(StoreOp::add) ||
          key_bytes > kMaxStoreKeyBytes || value_bytes > kMaxStoreValueBytes) {
        break;
      }
      const auto deadline = TcpClock::now() + std::chrono::seconds(60);
      std::string key = receive_bytes(fd, key_bytes, deadline, kClient);
      std::string value = receive_bytes(fd, value_bytes, deadline, kClient);
      const std::string out = answer(static_cast<StoreOp>(op), key, std::move(value), number);
      detail::send_all(fd, out.data(), out.size(), TcpClock::now() + std::chrono::seconds(60),
                       kClient);
    }
  } catch (const Error&) {
    // The client went away, or the server stops.
  }
  // The acceptor closes the descriptor (under the mutex, so that its number
  // is not reused while the destructor may still shut it down).
  ::shutdown(fd, SHUT_RDWR);
}

void StoreServer::State::reap_finished() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (!it->finished->load()) {
      ++it;
      continue;
    }
    it->thread.join();
    ::close(it->fd);
    it = connections.erase(it);
  }
}

StoreServer::StoreServer(int port) : state_(std::make_shared<State>(port)) {
  State* s = state_.get();
  s->acceptor = std::thread([s] {
    bool refused = false;
    for (;;) {
      // Out of descriptors (EMFILE), the listener stays readable: wait
      // before trying again rather than spin.
      if (refused) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      pollfd p{s->listener.fd(), POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      std::lock_guard lock(s->mutex);
      if (s->stopping) return;
      s->reap_finished();
      if (ready <= 0) continue;
      const int fd = ::accept4(s->listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      refused = fd < 0;
      if (fd < 0) continue;
      detail::set_no_delay(fd);
      auto finished = std::make_shared<std::atomic<bool>>(false);
      s->connections.push_back({.fd = fd,
                                .thread = std::thread([s, fd, finished] {
                                  s->serve(fd);
                                  finished->store(true);
                                }),
                                .finished = finished});
    }
  });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->changed.notify_all();
    for (const Connection& c : state_->connections) ::shutdown(c.fd, SHUT_RDWR);
  }
  state_->listener.shut_down();  // wakes the acceptor's poll
  state_->acceptor.join();
  for (Connection& c : state_->connections) {
    c.thread.join();
    ::close(c.fd);
  }
}

int StoreServer::port() const {
  return state_->listener.port();
}

namespace {

class TcpStore : public Store {
 public:
  TcpStore(int fd, std::string name, milliseconds timeout, std::string local)
      : fd_(fd), name_(std::move(name)), timeout_(timeout), local_(std::move(local)) {}
  ~TcpStore() override { ::close(fd_); }

  void set(const std::string& key, std::string_view value) override {
    request(StoreOp::set, key, value, 0, timeout_);
  }
  std::string get(const std::string& key, milliseconds timeout) override {
    auto [status, bytes] = request(StoreOp::get, key, {}, timeout.count(), timeout);
    if (status != StoreStatus::ok) {
      TANDEM_THROW(Timeout, "no process set '", key, "' in ", describe(), " within ",
                   timeout.count(), " ms");
    }
    return std::move(bytes);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    auto [status, bytes] = request(StoreOp::try_get, key, {}, 0, timeout_);
    if (status != StoreStatus::ok) return std::nullopt;
    return std::move(bytes);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    auto [status, bytes] = request(StoreOp::add, key, {}, delta, timeout_);
    if (status != StoreStatus::ok) TANDEM_THROW(InvalidArgument, bytes, " (", describe(), ")");
    return parse_count(bytes, key);
  }
  std::string local_address() const override { return local_; }
  std::string describe() const override { return name_; }

 private:
  std::pair<StoreStatus, std::string> request(StoreOp op, const std::string& key,
                                              std::string_view value, int64_t number,
                                              milliseconds wait) {
    if (key.size() > kMaxStoreKeyBytes) {
      TANDEM_THROW(InvalidArgument, "store key of ", key.size(), " bytes (at most ",
                   kMaxStoreKeyBytes, ")");
    }
    if (value.size() > kMaxStoreValueBytes) {
      TANDEM_THROW(InvalidArgument, "store value of ", value.size(), " bytes for '", key,
                   "' (at most ", kMaxStoreValueBytes, ")");
    }
    std::lock_guard lock(mutex_);
    // The first failure's words name the store already.
    if (!broken_.empty()) TANDEM_THROW(PeerFailed, broken_, " (the connection stays broken)");
    std::string out;
    append_field(out, static_cast<uint8_t>(op));
    append_field(out, static_cast<uint32_t>(key.size()));
    append_field(out, static_cast<uint64_t>(value.size()));
    append_field(out, number);
    out += key;
    try {
      // The server answers a get when the key is set or its wait is over.
      const auto deadline = TcpClock::now() + wait + std::chrono::seconds(10);
      detail::send_all(fd_, out.data(), out.size(), deadline, name_);
      detail::send_all(fd_, value.data(), value.size(), deadline, name_);
      char header[kAnswerHeader];
      detail::receive_exactly(fd_, header, sizeof header, deadline, name_);
      const char* p = header;
      const auto status = read_field<uint8_t>(p);
      const auto bytes = read_field<uint64_t>(p);
      if (status > static_cast<uint8_t>(StoreStatus::missing) || bytes > kMaxStoreValueBytes) {
        TANDEM_THROW(IoError, name_, " sent a malformed answer (not a tandem store?)");
      }
      return {static_cast<StoreStatus>(status), receive_bytes(fd_, bytes, deadline, name_)};
    } catch (const Error& e) {
      // A late answer would be taken for the next request's.
      broken_ = e.what();
      throw;
    }
  }

  int fd_;
  std::string name_;
  milliseconds timeout_;
  std::string local_;
  std::mutex mutex_;
  std::string broken_;
};

std::string advertised_address(const std::string& host, int fd) {
  const auto loopback = [](const std::string& a) { return a.starts_with("127."); };
  std::string local = detail::local_address(fd);
  // A store host named by a name that resolved to a loopback address (the
  // entry Debian's /etc/hosts gives the machine's own name, 127.0.1.1): the
  // job may span hosts, and peers elsewhere sent to a loopback address
  // would reach themselves. This host's first interface address instead.
  if (loopback(local) && host != "localhost" && !loopback(host)) {
    for (const std::string& a : detail::host_addresses()) {
      if (!loopback(a)) return a;
    }
  }
  return local;
}

}  // namespace

std::unique_ptr<Store> connect_store(const std::string& host, int port,
                                     milliseconds connect_timeout, milliseconds timeout) {
  if (port < 1 || port > 65535)
    TANDEM_THROW(InvalidArgument, "store port ", port, " is outside 1..65535");
  const std::string name = "the rendezvous store at " + host + ":" + std::to_string(port);
  const int fd = detail::connect_to(detail::resolve_host(host), port,
                                    std::chrono::duration<double>(connect_timeout).count(),
                                    "the rendezvous store at " + host);
  return std::make_unique<TcpStore>(fd, name, timeout, advertised_address(host, fd));
}

std::pair<std::string, int> parse_host_port(std::string_view text, std::string_view flag) {
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos && colon > 0) {
    const std::optional<int> port = parse_number<int>(text.substr(colon + 1));
    if (port && *port >= 1 && *port <= 65535) return {std::string(text.substr(0, colon)), *port};
  }
  TANDEM_THROW(InvalidArgument, flag, " '", text,
               "' is not HOST:PORT with a port in 1..65535 (e.g. node0:29400)");
}

}  // namespace tandem::comm
