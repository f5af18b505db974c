#include "tandem/cli/mpi_trial_runner.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/comm/mpi.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// How often the ranks look for messages and ended trials: trials take
// seconds at least.
constexpr auto kPollEvery = std::chrono::milliseconds(20);
constexpr auto kHelloWithin = std::chrono::seconds(60);

json job_to_json(const tune::TrialJob& job) {
  return {{"trial", job.trial},
          {"rung", job.rung},
          {"epochs", job.epochs},
          {"max_epochs", job.max_epochs},
          {"steps_per_epoch", job.steps_per_epoch},
          {"settings", job.settings},
          {"seed", job.seed},
          {"dir", job.dir}};
}

tune::TrialJob job_from_json(const json& j) {
  tune::TrialJob job;
  job.trial = j.at("trial").get<int64_t>();
  job.rung = j.at("rung").get<int64_t>();
  job.epochs = j.at("epochs").get<int64_t>();
  job.max_epochs = j.at("max_epochs").get<int64_t>();
  job.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
  job.settings = j.at("settings").get<tune::TrialSettings>();
  job.seed = j.at("seed").get<uint64_t>();
  job.dir = j.at("dir").get<std::string>();
  return job;
}

json outcome_to_json(const tune::TrialOutcome& o) {
  json curve = json::array();
  for (double v : o.curve) curve.push_back(std::isfinite(v) ? json(v) : json(nullptr));
  return {{"status", static_cast<int>(o.status)},
          {"curve", curve},
          {"seconds", o.seconds},
          {"error", o.error}};
}

tune::TrialOutcome outcome_from_json(const json& j) {
  tune::TrialOutcome o;
  const int status = j.at("status").get<int>();
  if (status < 0 || status > static_cast<int>(tune::TrialOutcome::Status::failed))
    TANDEM_THROW(IoError, "a trial outcome with status ", status);
  o.status = static_cast<tune::TrialOutcome::Status>(status);
  for (const json& v : j.at("curve"))
    o.curve.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
  o.seconds = j.at("seconds").get<double>();
  o.error = j.at("error").get<std::string>();
  return o;
}

// The next message from another rank, parsed; throws IoError for one
// that is not what a tandem search sends.
std::optional<std::pair<int, json>> poll_json() {
  auto message = comm::mpi_poll_message();
  if (!message) return std::nullopt;
  try {
    return std::pair(message->first, json::parse(message->second));
  } catch (const json::exception& e) {
    TANDEM_THROW(IoError, "rank ", message->first, " sent a message that is not JSON: ", e.what());
  }
}

void send_json(int to, const json& j) {
  comm::mpi_send_message(to, j.dump());
}

}  // namespace

MpiTrialRunner::MpiTrialRunner(ProcessTrialRunner& local, int64_t local_slots,
                               const std::atomic<bool>* interrupt)
    : local_(local), interrupt_(interrupt) {
  const int ranks = comm::mpi_world_size();
  slots_.assign(static_cast<size_t>(ranks), 0);
  running_.assign(static_cast<size_t>(ranks), 0);
  slots_[0] = local_slots;
  const auto deadline = Clock::now() + kHelloWithin;
  for (int heard = 1; heard < ranks;) {
    if (Clock::now() > deadline) {
      TANDEM_THROW(Timeout, "only ", heard - 1, " of the ", ranks - 1,
                   " other ranks of the search said they were ready within a minute");
    }
    auto message = poll_json();
    if (!message) {
      std::this_thread::sleep_for(kPollEvery);
      continue;
    }
    const auto& [rank, j] = *message;
    if (!j.contains("slots") || slots_[static_cast<size_t>(rank)] != 0)
      TANDEM_THROW(IoError, "rank ", rank, " sent ", j.dump(), " before saying it was ready");
    slots_[static_cast<size_t>(rank)] = std::max<int64_t>(1, j.at("slots").get<int64_t>());
    ++heard;
  }
}

MpiTrialRunner::~MpiTrialRunner() {
  for (size_t r = 1; r < slots_.size(); ++r) {
    try {
      send_json(static_cast<int>(r), {{"stop", true}});
    } catch (const Error&) {
    }
  }
}

int64_t MpiTrialRunner::slots() const {
  int64_t total = 0;
  for (int64_t s : slots_) total += s;
  return total;
}

void MpiTrialRunner::start(const tune::TrialJob& job) {
  // The rank with the most free slots, this one on a tie (so the jobs
  // spread over the hosts as they start).
  size_t best = 0;
  for (size_t r = 0; r < slots_.size(); ++r) {
    const int64_t free = slots_[r] - running_[r];
    if (free > slots_[best] - running_[best]) best = r;
  }
  if (slots_[best] - running_[best] <= 0)
    TANDEM_THROW(InvalidArgument, "a trial was started with every rank's slots busy");
  ++running_[best];
  if (best == 0) {
    local_.start(job);
  } else {
    send_json(static_cast<int>(best), {{"job", job_to_json(job)}});
  }
}

std::pair<tune::TrialJob, tune::TrialOutcome> MpiTrialRunner::wait() {
  for (;;) {
    if (!interrupted_ && interrupt_ && interrupt_->load()) {
      interrupted_ = true;
      for (size_t r = 1; r < slots_.size(); ++r)
        send_json(static_cast<int>(r), {{"interrupt", true}});
    }
    if (auto done = local_.poll()) {
      --running_[0];
      return std::move(*done);
    }
    if (auto message = poll_json()) {
      const auto& [rank, j] = *message;
      if (!j.contains("job") || !j.contains("outcome") || running_[static_cast<size_t>(rank)] < 1)
        TANDEM_THROW(IoError, "rank ", rank, " sent ", j.dump(), " where a trial's end was due");
      --running_[static_cast<size_t>(rank)];
      return {job_from_json(j.at("job")), outcome_from_json(j.at("outcome"))};
    }
    std::this_thread::sleep_for(kPollEvery);
  }
}

void serve_trials(ProcessTrialRunner& local, int64_t slots, std::atomic<bool>& interrupt) {
  send_json(0, {{"slots", slots}});
  bool stopping = false;
  for (;;) {
    while (auto message = poll_json()) {
      const auto& [rank, j] = *message;
      if (rank != 0) TANDEM_THROW(IoError, "rank ", rank, " sent a search message to a server");
      if (j.contains("job")) {
        const tune::TrialJob job = job_from_json(j.at("job"));
        try {
          local.start(job);
        } catch (const Error& e) {
          send_json(0, {{"job", job_to_json(job)},
                        {"outcome", outcome_to_json({.status = tune::TrialOutcome::Status::failed,
                                                     .error = e.what()})}});
        }
      } else if (j.contains("interrupt")) {
        interrupt.store(true);
      } else if (j.contains("stop")) {
        // The search ended (or failed): what still runs stops with its checkpoint.
        interrupt.store(true);
        stopping = true;
      }
    }
    while (auto done = local.poll())
      if (!stopping)
        send_json(0,
                  {{"job", job_to_json(done->first)}, {"outcome", outcome_to_json(done->second)}});
    if (stopping && local.running() == 0) return;
    std::this_thread::sleep_for(kPollEvery);
  }
}

}  // namespace tandem::cli
