#include "tandem/comm/elastic_group.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/comm/gloo.h"
#include "tandem/comm/store.h"

namespace tandem::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kConnectTimeout = std::chrono::seconds(60);
constexpr auto kPollEvery = milliseconds(50);
// Generations a regroup tries before it gives up.
constexpr int64_t kMaxAttempts = 8;
// What a member that leaves (its destructor) marks itself lost with.
constexpr const char* kLeftTheJob = "left the job";

std::string join_ids(const std::vector<int>& ids) {
  std::string text;
  for (int id : ids) {
    if (!text.empty()) text += ',';
    text += std::to_string(id);
  }
  return text;
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

// When each member's heartbeat last changed, as this process saw it.
class Liveness {
 public:
  // Whether `id`'s heartbeat `beat` has not changed for `timeout`.
  bool stale(int id, const std::optional<std::string>& beat, milliseconds timeout) {
    const auto now = Clock::now();
    auto [it, fresh] = seen_.try_emplace(id, beat, now);
    if (!fresh && it->second.first != beat) it->second = {beat, now};
    return now - it->second.second > timeout;
  }

 private:
  std::map<int, std::pair<std::optional<std::string>, Clock::time_point>> seen_;
};

}  // namespace

struct ElasticGroup::State {
  std::string host;
  int port = 0;
  std::string base;  // "<prefix>/elastic/"
  ElasticOptions options;
  int id = 0;
  std::shared_ptr<Store> store;        // regroups and the communicators
  std::shared_ptr<Store> watch_store;  // the heartbeat thread's own connection

  std::mutex mutex;  // membership and comm, against the watcher
  Membership membership;
  std::shared_ptr<Communicator> comm;
  // The ids the last generation's decider settled (Decision::settled), and
  // next_id as the heartbeat thread last read it: more ids than settled are
  // joiners waiting.
  std::atomic<int64_t> known_ids{0}, seen_ids{0};

  std::atomic<bool> stopping{false}, beating{true};
  std::thread watcher;

  std::string key(const std::string& name) const { return base + name; }
  std::string key(const std::string& name, int64_t n) const {
    return base + name + "/" + std::to_string(n);
  }
  std::string generation_key(int64_t generation, const std::string& name) const {
    return base + "gen/" + std::to_string(generation) + "/" + name;
  }

  void watch();
  void check_members(Liveness& liveness);
  bool lost(Store& s, int member) { return s.try_get(key("lost", member)).has_value(); }
  struct Decision {
    std::vector<int> members;
    // Ids below this are members, lost, or joiners that died waiting; the
    // first joiner left for a later generation (full, or not yet asking
    // when the decider looked) is at or above it.
    int64_t settled = 0;
  };
  Decision decide(int64_t generation, const Membership& old);
  std::optional<std::string> await_decision(int64_t generation);
  std::optional<Membership> try_generation(int64_t generation, const Membership& old);
  int64_t next_id() {
    const auto text = store->try_get(key("next_id"));
    return text ? std::stoll(*text) : 0;
  }
};

void ElasticGroup::State::watch() {
  Liveness liveness;
  int64_t beat = 0;
  while (!stopping.load()) {
    try {
      if (beating.load()) watch_store->set(key("hb", id), std::to_string(++beat));
      check_members(liveness);
      // Read here, not by joiners_waiting(), which the training loop asks
      // at every step.
      if (const auto ids = watch_store->try_get(key("next_id"))) seen_ids = std::stoll(*ids);
    } catch (const Error& e) {
      std::lock_guard lock(mutex);
      if (comm) comm->abort(std::string("the rendezvous store is lost: ") + e.what());
      return;
    }
    const auto next = Clock::now() + options.heartbeat_every;
    while (!stopping.load() && Clock::now() < next) std::this_thread::sleep_for(kPollEvery);
  }
}

// Aborts the current communicator when one of its members is lost, so that
// the others' collectives end at once instead of at their timeout.
void ElasticGroup::State::check_members(Liveness& liveness) {
  std::vector<int> members;
  int64_t generation = 0;
  {
    std::lock_guard lock(mutex);
    members = membership.members;
    generation = membership.generation;
  }
  for (int member : members) {
    if (member == id) continue;
    std::string why;
    if (const auto marked = watch_store->try_get(key("lost", member))) {
      // A member that left when its work was done (its destructor) is not
      // waited for again, but the others may still be finishing the last
      // collective with it: closed connections end any that would wait.
      if (*marked == kLeftTheJob) continue;
      why = *marked;
    } else if (liveness.stale(member, watch_store->try_get(key("hb", member)),
                              options.peer_timeout)) {
      why = "no heartbeat for " + std::to_string(options.peer_timeout.count()) + " ms";
      // Marked for every member, so that the regroup's decider does not
      // wait for its silence all over again.
      watch_store->set(key("lost", member), why);
    }
    if (why.empty()) continue;
    std::lock_guard lock(mutex);
    // Not a communicator of a later generation, which may exclude the member.
    if (comm && membership.generation == generation)
      comm->abort("member " + std::to_string(member) + " lost: " + why);
  }
}

// The next generation's members as the first member to arrive sees them:
// each old member once it arrives, is marked lost or falls silent, and the
// joiners waiting.
ElasticGroup::State::Decision ElasticGroup::State::decide(int64_t generation,
                                                          const Membership& old) {
  Liveness liveness;
  const auto deadline = Clock::now() + options.comm.timeout;
  std::vector<int> members;
  for (int member : old.members) {
    for (;;) {
      if (store->try_get(generation_key(generation, "arrived/" + std::to_string(member)))) {
        members.push_back(member);
        break;
      }
      if (lost(*store, member) ||
          liveness.stale(member, store->try_get(key("hb", member)), options.peer_timeout) ||
          Clock::now() > deadline) {
        break;
      }
      std::this_thread::sleep_for(kPollEvery);
    }
  }
  // Joiners waiting whose heartbeat still moves (one that died while it
  // waited would make every later generation fail to form).
  Decision decision{.settled = next_id()};
  std::map<int, std::optional<std::string>> joiners;
  std::vector<int> arriving;  // an id taken, not yet asking to join
  for (int64_t j = 0; j < decision.settled; ++j) {
    const int joiner = static_cast<int>(j);
    if (std::find(old.members.begin(), old.members.end(), joiner) != old.members.end() ||
        lost(*store, joiner)) {
      continue;
    }
    if (store->try_get(key("joining", joiner))) {
      joiners[joiner] = store->try_get(key("hb", joiner));
    } else {
      arriving.push_back(joiner);
    }
  }
  if (!joiners.empty() || !arriving.empty())
    std::this_thread::sleep_for(3 * options.heartbeat_every);
  const auto later = [&](int joiner) {
    decision.settled = std::min<int64_t>(decision.settled, joiner);
  };
  for (const auto& [joiner, beat] : joiners) {
    if (static_cast<int>(members.size()) >= options.max_members) {
      later(joiner);  // it waits for room
    } else if (store->try_get(key("hb", joiner)) != beat) {
      members.push_back(joiner);
    }
  }
  // One asking by now is alive and is taken in by the next generation; one
  // that never asks (it died between taking its id and asking) is settled.
  for (int joiner : arriving) {
    if (store->try_get(key("joining", joiner))) later(joiner);
  }
  std::sort(members.begin(), members.end());
  decision.members = std::move(members);
  return decision;
}

// The members `generation`'s decider publishes; nothing when the decider is
// lost first (marked lost, or its heartbeat still for peer_timeout: the
// next generation is tried then, not after the whole decision's timeout).
std::optional<std::string> ElasticGroup::State::await_decision(int64_t generation) {
  const auto deadline =
      Clock::now() + options.comm.timeout + options.peer_timeout + std::chrono::seconds(10);
  Liveness liveness;
  for (;;) {
    if (auto decided = store->try_get(generation_key(generation, "members"))) return decided;
    if (Clock::now() > deadline) return std::nullopt;
    if (const auto decider = store->try_get(generation_key(generation, "decider_id"))) {
      const int d = std::stoi(*decider);
      if (d != id && (lost(*store, d) ||
                      liveness.stale(d, store->try_get(key("hb", d)), options.peer_timeout)))
        return std::nullopt;
    }
    std::this_thread::sleep_for(kPollEvery);
  }
}

// One attempt at `generation`; nothing when it failed and the next one
// should be tried (a member or the decider lost meanwhile).
std::optional<Membership> ElasticGroup::State::try_generation(int64_t generation,
                                                              const Membership& old) {
  store->set(generation_key(generation, "arrived/" + std::to_string(id)), "1");
  if (store->add(generation_key(generation, "decider"), 1) == 1) {
    store->set(generation_key(generation, "decider_id"), std::to_string(id));
    const Decision decision = decide(generation, old);
    const std::vector<int>& members = decision.members;
    const int left = static_cast<int>(members.size());
    if (left < options.min_members) {
      store->set(generation_key(generation, "members"),
                 "!only " + std::to_string(left) + " member(s) left (" + join_ids(members) +
                     "), fewer than the " + std::to_string(options.min_members) + " needed");
    } else {
      for (int m : members) {
        if (std::find(old.members.begin(), old.members.end(), m) == old.members.end())
          store->set(key("joined", m), std::to_string(generation));
      }
      // Before the members, which the others wait for.
      store->set(generation_key(generation, "settled"), std::to_string(decision.settled));
      store->set(generation_key(generation, "members"), join_ids(members));
    }
  }
  const std::optional<std::string> published = await_decision(generation);
  if (!published) return std::nullopt;
  const std::string& decided = *published;
  if (!decided.empty() && decided.front() == '!') {
    TANDEM_THROW(CommError, "elastic job '", base.substr(0, base.size() - 9),
                 "': ", decided.substr(1));
  }
  Membership next{.generation = generation, .members = parse_ids(decided)};
  const auto self = std::find(next.members.begin(), next.members.end(), id);
  if (self == next.members.end()) {
    TANDEM_THROW(PeerFailed, "elastic member ", id, " was given up by the others (generation ",
                 generation, " has members ", decided, ")");
  }
  next.rank = static_cast<int>(self - next.members.begin());
  try {
    auto made = make_gloo_communicator(store, generation_key(generation, "comm"), next.rank,
                                       static_cast<int>(next.members.size()), options.comm);
    std::lock_guard lock(mutex);
    comm = std::move(made);
    membership = next;
  } catch (const Timeout&) {
    return std::nullopt;  // a member was lost while the group formed
  } catch (const PeerFailed&) {
    return std::nullopt;
  }
  // Set before the members were: joiners past it are asked about next.
  const auto settled = store->try_get(generation_key(generation, "settled"));
  known_ids = settled ? std::stoll(*settled) : next_id();
  return next;
}

ElasticGroup::ElasticGroup(std::shared_ptr<State> state) : state_(std::move(state)) {
  State* s = state_.get();
  s->watcher = std::thread([s] { s->watch(); });
}

namespace {

std::shared_ptr<ElasticGroup::State> connect(const std::string& host, int port,
                                             const std::string& prefix, ElasticOptions options) {
  if (options.min_members < 1 || options.max_members < options.min_members) {
    TANDEM_THROW(InvalidArgument, "elastic membership bounds ", options.min_members, "..",
                 options.max_members, " are not 1 <= min <= max");
  }
  // A peer is lost after peer_timeout without a new heartbeat: beats at
  // least twice in that time, or live members would be taken for lost.
  if (options.heartbeat_every.count() <= 0 || options.heartbeat_every * 2 > options.peer_timeout) {
    TANDEM_THROW(InvalidArgument, "elastic heartbeat every ", options.heartbeat_every.count(),
                 " ms with a peer timeout of ", options.peer_timeout.count(),
                 " ms: the heartbeat must be positive and at most half the timeout");
  }
  if (options.join_timeout.count() <= 0) {
    TANDEM_THROW(InvalidArgument, "elastic join timeout of ", options.join_timeout.count(),
                 " ms: it must be positive");
  }
  auto s = std::make_shared<ElasticGroup::State>();
  s->host = host;
  s->port = port;
  s->base = prefix + "/elastic/";
  s->options = options;
  s->store = connect_store(host, port, kConnectTimeout);
  s->watch_store = connect_store(host, port, kConnectTimeout);
  return s;
}

}  // namespace

std::unique_ptr<ElasticGroup> ElasticGroup::start(const std::string& host, int port,
                                                  const std::string& prefix, int id,
                                                  int initial_members, ElasticOptions options) {
  if (initial_members < 1 || id < 0 || id >= initial_members) {
    TANDEM_THROW(InvalidArgument, "elastic member ", id, " is outside a first generation of ",
                 initial_members);
  }
  auto s = connect(host, port, prefix, options);
  s->id = id;
  if (id == 0) s->store->set(s->key("next_id"), std::to_string(initial_members));
  s->membership.generation = 0;
  for (int m = 0; m < initial_members; ++m) s->membership.members.push_back(m);
  s->membership.rank = id;
  s->known_ids = initial_members;
  s->comm = make_gloo_communicator(s->store, s->generation_key(0, "comm"), id, initial_members,
                                   options.comm);
  s->store->add(s->key("formed"), 1);  // elastic_job_formed()
  return std::unique_ptr<ElasticGroup>(new ElasticGroup(std::move(s)));
}

std::unique_ptr<ElasticGroup> ElasticGroup::join(const std::string& host, int port,
                                                 const std::string& prefix,
                                                 ElasticOptions options) {
  auto s = connect(host, port, prefix, options);
  // Member 0 sets the first free id when it starts: a joiner that took one
  // before would be given id 0, which member 0's set then gives out again.
  try {
    s->store->get(s->key("next_id"), options.join_timeout);
  } catch (const Timeout&) {
    TANDEM_THROW(Timeout, "elastic joiner found no job under '", prefix, "' within ",
                 options.join_timeout.count(), " ms (its member 0 never started)");
  }
  s->id = static_cast<int>(s->store->add(s->key("next_id"), 1) - 1);
  std::unique_ptr<ElasticGroup> group(new ElasticGroup(s));  // heartbeats from now on
  s->store->set(s->key("joining", s->id), "1");
  const auto deadline = Clock::now() + options.join_timeout;
  int64_t tried = -1;
  while (Clock::now() < deadline) {
    const auto taken = s->store->try_get(s->key("joined", s->id));
    if (!taken || std::stoll(*taken) == tried) {
      std::this_thread::sleep_for(kPollEvery);
      continue;
    }
    tried = std::stoll(*taken);
    // A joiner has no old members to wait for.
    Membership none{.generation = tried - 1};
    if (auto made = s->try_generation(tried, none)) return group;
  }
  TANDEM_THROW(Timeout, "elastic joiner ", s->id, " was not taken in within ",
               options.join_timeout.count(), " ms (are the members checking joiners_waiting()?)");
}

void ElasticGroup::mark_lost(const std::string& host, int port, const std::string& prefix, int id,
                             const std::string& why) {
  connect_store(host, port, kConnectTimeout)
      ->set(prefix + "/elastic/lost/" + std::to_string(id), why);
}

bool ElasticGroup::formed(Store& store, const std::string& prefix, int initial_members) {
  const auto count = store.try_get(prefix + "/elastic/formed");
  return count && std::stoll(*count) >= initial_members;
}

ElasticGroup::~ElasticGroup() {
  state_->stopping = true;
  state_->watcher.join();
  try {
    state_->store->set(state_->key("lost", state_->id), kLeftTheJob);
  } catch (const Error&) {
    // The store is gone: nobody waits for this member either.
  }
  std::lock_guard lock(state_->mutex);
  if (state_->comm) state_->comm->abort("member " + std::to_string(state_->id) + " left");
}

int ElasticGroup::id() const {
  return state_->id;
}

const Membership& ElasticGroup::membership() const {
  return state_->membership;
}

Communicator& ElasticGroup::communicator() {
  return *state_->comm;
}

std::shared_ptr<Communicator> ElasticGroup::shared_communicator() {
  std::lock_guard lock(state_->mutex);
  return state_->comm;
}

bool ElasticGroup::joiners_waiting() {
  if (static_cast<int>(state_->membership.members.size()) >= state_->options.max_members)
    return false;
  return state_->seen_ids.load() > state_->known_ids.load();
}

const Membership& ElasticGroup::regroup() {
  State& s = *state_;
  Membership old;
  std::shared_ptr<Communicator> previous;
  {
    std::lock_guard lock(s.mutex);
    old = s.membership;
    if (s.comm) s.comm->abort("member " + std::to_string(s.id) + " regroups");
    previous = std::move(s.comm);
  }
  previous.reset();
  for (int64_t generation = old.generation + 1; generation <= old.generation + kMaxAttempts;
       ++generation) {
    if (s.try_generation(generation, old)) return s.membership;
  }
  TANDEM_THROW(CommError, "elastic member ", s.id, " could not form a new generation in ",
               kMaxAttempts, " attempts after generation ", old.generation,
               " (members keep being lost while it forms)");
}

void ElasticGroup::stop_heartbeats_for_test() {
  state_->beating = false;
}

}  // namespace tandem::comm
