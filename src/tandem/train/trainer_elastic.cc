// The Trainer's side of elastic training (multi_worker under tandem launch
// --elastic; the contract is in trainer.h): joining the membership, the
// in-memory copy of the state, and the move to a new membership.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "tandem/base/error.h"
#include "tandem/comm/launch.h"
#include "tandem/distribute/agreement.h"
#include "tandem/distribute/state_broadcast.h"
#include "tandem/train/detail/trainer_state.h"

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;

// Besides the position, sums and history a checkpoint holds
// (write_position), the copy's metadata has the epoch's steps (for a
// joiner, which has not counted them) and the last step's learning rate.
constexpr const char* kStepsPerEpochKey = "trainer.steps_per_epoch";
constexpr const char* kLearningRateKey = "trainer.learning_rate";
// Moves to a new membership tried before the job gives up (members keep
// being lost while the state is shared).
constexpr int kMaxMembershipAttempts = 4;

// The ids of `from` that are not in `other`.
std::vector<int> not_in(const std::vector<int>& from, const std::vector<int>& other) {
  std::vector<int> out;
  for (int id : from) {
    if (std::find(other.begin(), other.end(), id) == other.end()) out.push_back(id);
  }
  return out;
}

}  // namespace

void Trainer::start_elastic() {
  const std::string refused = "tandem launch --elastic ";
  if (config_.strategy.kind != distribute::StrategyKind::multi_worker) {
    TANDEM_THROW(InvalidArgument, refused, "trains with --strategy multi-worker; got ",
                 distribute::strategy_name(config_.strategy.kind));
  }
  if (config_.strategy.device_kind != DeviceKind::cpu) {
    TANDEM_THROW(NotImplemented, refused,
                 "trains on CPUs: NCCL communicators are not rebuilt over a new membership yet");
  }
  if (config_.engine.reducer.zero_stage > 0) {
    TANDEM_THROW(InvalidArgument, refused, "does not run ZeRO (--zero ",
                 config_.engine.reducer.zero_stage,
                 "): its shards would have to be gathered from the survivors and partitioned "
                 "again over every new membership, and a lost member's shard is lost with it; "
                 "train without --zero");
  }
  if (config_.engine.sync_every > 0) {
    TANDEM_THROW(InvalidArgument, refused,
                 "does not run local SGD (--sync-every): the replicas' copies differ between "
                 "averages, so no member holds the state to roll back to");
  }
  if (config_.auto_shard == data::AutoShardPolicy::file ||
      config_.auto_shard == data::AutoShardPolicy::off) {
    TANDEM_THROW(InvalidArgument, refused, "shards the data by example (it re-shards the rest of ",
                 "an epoch over each new membership); --auto-shard ",
                 data::auto_shard_policy_name(config_.auto_shard),
                 " cannot be re-sharded (use auto or data)");
  }
  config_.auto_shard = data::AutoShardPolicy::data;
  // Every member must run as many replicas; one per process unless
  // --devices says otherwise, not one per core (a joiner's host may have
  // another number of cores).
  if (config_.strategy.devices == 0) config_.strategy.devices = 1;
  elastic_ = std::make_unique<ElasticState>();
  elastic_->group = comm::join_elastic_job(
      {.comm = config_.strategy.comm, .peer_timeout = config_.strategy.comm.peer_timeout});
  // The first generation's members start together; a later one joined.
  elastic_->awaiting_state = elastic_->group->membership().generation > 0;
  config_.strategy.processes = elastic_->group->shared_communicator();
}

namespace {

constexpr const char* kSettingPrefix = "trainer.setting.";

// The settings in `state`'s metadata that differ from `mine`, named with
// both values ("batch_size 96 here, 64 in the job"); empty when none does.
std::string differences(const distribute::EngineState& state,
                        const std::map<std::string, std::string>& mine) {
  std::string out;
  for (const auto& [key, value] : mine) {
    const auto it = state.metadata.find(kSettingPrefix + key);
    const std::string theirs = it == state.metadata.end() ? "(none)" : it->second;
    if (theirs == value) continue;
    out += fmt::format("{}{} {} here, {} in the job", out.empty() ? "" : "; ", key, value, theirs);
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> Trainer::elastic_settings() {
  std::map<std::string, std::string> settings;
  for (const auto& [key, value] : resume_settings()) settings[key] = value;
  settings["model"] = model_.spec.name;
  settings["epochs"] = std::to_string(config_.epochs);
  settings["elastic_copy_every"] = std::to_string(config_.elastic_copy_every);
  settings["local_replicas"] = std::to_string(strategy_->local_replicas());
  return settings;
}

void Trainer::check_elastic_settings() {
  distribute::EngineState mine;
  const std::map<std::string, std::string> settings = elastic_settings();
  for (const auto& [key, value] : settings) mine.metadata[kSettingPrefix + key] = value;
  const std::string differ =
      differences(distribute::broadcast_state(*config_.strategy.processes, &mine), settings);
  const bool any = distribute::any_process(*strategy_, !differ.empty());
  if (!differ.empty()) {
    TANDEM_THROW(InvalidArgument, "this worker's settings differ from worker 0's: ", differ,
                 " (every worker of an elastic job must run the same command)");
  }
  if (any) {
    TANDEM_THROW(InvalidArgument,
                 "another worker's settings differ from worker 0's (its error "
                 "names them; every worker must run the same command)");
  }
}

void Trainer::copy_state(Progress& progress, const std::vector<EpochResult>& history) {
  synchronize_engine(progress);
  detail::fold_partial_sums(*strategy_, progress.replica_losses, metric_sums_, progress.loss_sum,
                            progress.metrics);
  distribute::EngineState state = distribute::copy_state(engine_->save_state());
  write_position(progress, history, state.metadata);
  state.metadata[kStepsPerEpochKey] = std::to_string(steps_per_epoch_);
  state.metadata[kLearningRateKey] = fmt::format("{}", progress.learning_rate);
  for (const auto& [key, value] : elastic_settings()) state.metadata[kSettingPrefix + key] = value;
  elastic_->copy = std::move(state);
}

void Trainer::adopt_shared_state(Progress& progress, TrainResult& result) {
  distribute::EngineState state = distribute::broadcast_state(
      *config_.strategy.processes, elastic_->copy ? &*elastic_->copy : nullptr);
  if (elastic_->awaiting_state) {  // a joiner: the members' settings checked first
    if (const std::string differ = differences(state, elastic_settings()); !differ.empty()) {
      TANDEM_THROW(InvalidArgument,
                   "this worker cannot join: its settings differ from the job's: ", differ,
                   " (a joiner must run the job's command)");
    }
  }
  engine_->load_state(state);
  read_position(state, "the elastic job's state copy", progress, result.history);
  steps_per_epoch_ = state.meta_integer(kStepsPerEpochKey);
  progress.learning_rate = state.meta_number(kLearningRateKey);
  progress.replica_losses.assign(static_cast<size_t>(strategy_->local_replicas()), 0.0);
  reset_metric_sums();
  elastic_->copy = std::move(state);
  elastic_->awaiting_state = false;
  elastic_->last_step_end = Clock::now();
}

void Trainer::change_membership(Progress& progress, TrainResult& result, const std::string& reason,
                                const TrainCallbacks& callbacks) {
  const int64_t left_at = progress.global_step;
  const Clock::time_point last_step_end = elastic_->last_step_end;
  const std::vector<int> before = elastic_->group->membership().members;
  for (int attempt = 1;; ++attempt) {
    // The engine uses the strategy, the strategy the generation's
    // communicator, which regroup() replaces.
    engine_.reset();
    strategy_.reset();
    config_.strategy.processes.reset();
    elastic_->group->regroup();  // throws when this member was given up or too few are left
    try {
      config_.strategy.processes = elastic_->group->shared_communicator();
      strategy_ = distribute::make_strategy(config_.strategy);
      // The share of each replica changes with their number; so does the
      // micro-batch under accumulation.
      try {
        split_global_batch(config_, strategy_->global_replicas());
      } catch (const InvalidArgument& e) {
        TANDEM_THROW(InvalidArgument, "the elastic job's new membership of ",
                     strategy_->global_replicas(), " replicas cannot split the batch: ", e.what(),
                     "; choose a global batch that every membership from --min-workers up "
                     "divides");
      }
      engine_ = strategy_->make_engine(model_.build, engine_options());
      reset_metric_sums();
      adopt_shared_state(progress, result);
      break;
    } catch (const PeerFailed&) {
      if (attempt == kMaxMembershipAttempts) throw;  // another member lost meanwhile: again
    }
  }
  for (int r = 0; r < strategy_->local_replicas(); ++r) engine_->model(r).train();
  const comm::Membership& now = elastic_->group->membership();
  const MembershipChange change{
      .generation = now.generation,
      .members = now.members,
      .lost = not_in(before, now.members),
      .joined = not_in(now.members, before),
      .reason = reason,
      .global_step = progress.global_step,
      .rolled_back_steps = left_at - progress.global_step,
      .seconds = std::chrono::duration<double>(Clock::now() - last_step_end).count(),
      .process_batch = config_.batch_size / static_cast<int64_t>(now.members.size())};
  if (callbacks.on_membership_change) callbacks.on_membership_change(change);
}

}  // namespace tandem::train
