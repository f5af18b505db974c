#pragma once
// A key-value store that the processes of a job meet at (rendezvous): one
// process serves it (StoreServer, over TCP), every process connects to it
// (connect_store). gloo exchanges its connection addresses through it
// (make_gloo_communicator), `tandem launch`'s nodes register and check
// each other through it, and elastic members agree on membership through
// it (ElasticGroup).
//
// Values are bytes; keys are at most kMaxStoreKeyBytes, values at most
// kMaxStoreValueBytes (larger ones are refused before anything is
// allocated). Every call is thread-safe. A lost server makes every call
// throw PeerFailed naming it; no call waits longer than its timeout.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::comm {

inline constexpr size_t kMaxStoreKeyBytes = 4096;
inline constexpr uint64_t kMaxStoreValueBytes = uint64_t{1} << 30;

class Store {
 public:
  virtual ~Store();
  // Sets (or replaces) key's value.
  virtual void set(const std::string& key, std::string_view value) = 0;
  // Key's value, waiting until some process sets it; throws Timeout naming
  // the key after `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Key's value if it is set now.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Adds `delta` to the counter `key` (0 when unset; its value is the
  // decimal text) and returns the new count: atomic across processes.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // The address of this host that the store's server sees: an address
  // through which this host's peers (which reach the same server) can reach
  // it. When the store's host was named by a name that resolved to a
  // loopback address (Debian's /etc/hosts gives the machine's own name
  // 127.0.1.1), this host's first non-loopback interface address instead:
  // only "localhost" or a 127.x address names a one-host job.
  virtual std::string local_address() const = 0;
  // "the rendezvous store at HOST:PORT", for errors.
  virtual std::string describe() const = 0;
};

// Serves a store on `port` of every interface (0: a port the kernel
// chooses) from threads of this process until destroyed. Throws PeerFailed
// when the port cannot be bound (naming it).
class StoreServer {
 public:
  explicit StoreServer(int port = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

  struct State;  // defined in store.cc

 private:
  std::shared_ptr<State> state_;
};

// A connection to the store served at host:port, retried until
// `connect_timeout` (the server may start after its clients). Throws
// InvalidArgument for a host that does not resolve, PeerFailed naming the
// address when nothing answers in time. `timeout` bounds each later call
// that does not take its own (set, try_get, add).
std::unique_ptr<Store> connect_store(const std::string& host, int port,
                                     std::chrono::milliseconds connect_timeout,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(60));

// "HOST:PORT" split into its parts; throws InvalidArgument naming `flag` and
// the text for anything else (no port, a port outside 1..65535).
std::pair<std::string, int> parse_host_port(std::string_view text, std::string_view flag);

}  // namespace tandem::comm
