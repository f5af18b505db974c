#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "tandem/autograd/functions.h"
#include "tandem/base/detail/test_fault.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/trace.h"
#include "tandem/comm/launch.h"
#include "tandem/distribute/agreement.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/detail/epoch_json.h"
#include "tandem/train/detail/trainer_state.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/run_directory.h"

namespace tandem::train {

namespace {

using Clock = std::chrono::steady_clock;

int64_t to_steps(double epochs, int64_t steps_per_epoch) {
  return static_cast<int64_t>(std::llround(epochs * static_cast<double>(steps_per_epoch)));
}

std::vector<std::pair<std::string, double>> metric_values(const std::vector<Metric>& metrics,
                                                          const std::vector<MetricSums>& totals) {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < metrics.size(); ++i)
    out.emplace_back(metrics[i].name, metric_value(metrics[i], totals[i]));
  return out;
}

double find_metric(const std::vector<std::pair<std::string, double>>& values,
                   const std::string& name) {
  for (const auto& [n, v] : values) {
    if (n == name) return v;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

using detail::process_index_of;
using detail::processes_of;

double EpochResult::train_metric(const std::string& name) const {
  return find_metric(train_metrics, name);
}

double EpochResult::validation_metric(const std::string& name) const {
  return find_metric(validation_metrics, name);
}

double EpochResult::mean_staleness() const {
  double sum = 0.0, count = 0.0;
  for (size_t s = 0; s < staleness.size(); ++s) {
    sum += static_cast<double>(s) * static_cast<double>(staleness[s]);
    count += static_cast<double>(staleness[s]);
  }
  return count > 0.0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
}

double EvalResult::metric(const std::string& name) const {
  return find_metric(metrics, name);
}

Trainer::Trainer(TrainConfig config, std::shared_ptr<nn::Module> model, std::string name)
    : Trainer(std::move(config),
              custom_model(std::move(name), [model, used = std::make_shared<bool>(false)]() {
                if (!model) TANDEM_THROW(InvalidArgument, "Trainer needs a model");
                if (*used) {
                  TANDEM_THROW(InvalidArgument,
                               "a Trainer given one model runs one replica; "
                               "pass a model factory to replicate it");
                }
                *used = true;
                return model;
              })) {}

Trainer::Trainer(TrainConfig config, ModelFactory model)
    : config_(std::move(config)), model_(std::move(model)) {
  if (!model_.build) TANDEM_THROW(InvalidArgument, "Trainer needs a model factory");
  check_train_config(config_);
  if (comm::launched_elastic()) start_elastic();
  strategy_ = distribute::make_strategy(config_.strategy);
  resolve_batch_sizes(config_, strategy_->global_replicas());
  config_.engine.optimizer.learning_rate =
      optim::scaled_learning_rate(config_.engine.optimizer.learning_rate, config_.lr_scaling,
                                  config_.batch_size, config_.reference_batch);
  check_schedule_settings(config_);  // against the scaled rate
  engine_ = strategy_->make_engine(model_.build, engine_options());
  reset_metric_sums();
}

Trainer::~Trainer() = default;

void Trainer::reset_metric_sums() {
  const auto replicas = static_cast<size_t>(strategy_->local_replicas());
  metric_sums_.assign(replicas, std::vector<MetricSums>(config_.metrics.size()));
  step_metric_sums_.assign(replicas, std::vector<MetricSums>(config_.metrics.size()));
}

distribute::EngineOptions Trainer::engine_options() const {
  return engine_options_of(config_, model_.spec.policy);
}

std::string Trainer::checkpoint_path() const {
  return config_.output_dir.empty() ? std::string() : RunDirectory(config_.output_dir).checkpoint();
}

void Trainer::make_schedule(int64_t per_epoch) {
  const bool needs_size =
      config_.schedule != optim::ScheduleKind::constant || config_.warmup_epochs > 0.0;
  if (per_epoch == 0 && needs_size) {
    TANDEM_THROW(InvalidArgument, "the ", optim::schedule_name(config_.schedule), " schedule",
                 config_.warmup_epochs > 0.0 ? " with warm-up" : "",
                 " is measured in epochs, but the training data's size is not known without "
                 "reading it (a filter, an interleave, compressed TFRecord files, repeat(), a "
                 "Python generator without cardinality=); set steps_per_epoch "
                 "(--steps-per-epoch) or use the constant schedule");
  }
  schedule_ = optim::make_schedule(
      {.kind = config_.schedule,
       .base_lr = config_.engine.optimizer.learning_rate,
       .step_size = std::max<int64_t>(1, to_steps(config_.lr_step_epochs, per_epoch)),
       .gamma = config_.lr_gamma,
       .total_steps = std::max<int64_t>(1, per_epoch * config_.epochs),
       .min_lr = config_.min_lr,
       .warmup_steps = to_steps(config_.warmup_epochs, per_epoch)});
}

distribute::ForwardFn Trainer::training_forward() {
  return [this](nn::Module& model, const distribute::ReplicaBatch& b) {
    const Variable outputs =
        model.forward(Variable(b.rows.at(config_.input_feature).to(current_device())));
    Variable per_example = config_.loss.per_example(outputs, b.rows);
    const bool asynchronous = config_.strategy.kind == distribute::StrategyKind::parameter_server;
    std::vector<MetricSums>& sums =
        (asynchronous ? metric_sums_ : step_metric_sums_)[b.context.local_replica];
    for (size_t i = 0; i < config_.metrics.size(); ++i) {
      const MetricSums s = config_.metrics[i].measure(outputs.value(), b.rows);
      sums[i].sum += s.sum;
      sums[i].count += s.count;
    }
    return per_example;
  };
}

EvalResult Trainer::evaluate(const data::Dataset& dataset) {
  const int processes = processes_of(*strategy_);
  const int local = strategy_->local_replicas();
  const size_t metrics = config_.metrics.size();
  // Per local replica: loss sum, examples, then (sum, count) per metric.
  std::vector<std::vector<double>> sums(static_cast<size_t>(local),
                                        std::vector<double>(2 + 2 * metrics, 0.0));
  std::exception_ptr error;
  try {
    const int64_t batch = (config_.eval_batch_size + processes - 1) / processes;
    data::Iterator it = batched(dataset, batch, false).iterator();
    NumThreadsScope main_threads(local > 1 ? 1 : strategy_->threads_per_replica());
    while (std::optional<data::Element> e = it.next()) {
      engine_->evaluate(*e, [&](nn::Module& model, const distribute::ReplicaBatch& b) {
        const Variable outputs =
            model.forward(Variable(b.rows.at(config_.input_feature).to(current_device())));
        const Tensor per_example = config_.loss.per_example(outputs, b.rows).value();
        std::vector<double>& s = sums[b.context.local_replica];
        for (float v : per_example.to_floats()) s[0] += v;
        s[1] += static_cast<double>(per_example.numel());
        for (size_t i = 0; i < metrics; ++i) {
          const MetricSums m = config_.metrics[i].measure(outputs.value(), b.rows);
          s[2 + 2 * i] += m.sum;
          s[3 + 2 * i] += m.count;
        }
      });
    }
  } catch (...) {
    if (processes == 1) throw;
    error = std::current_exception();
  }
  if (processes > 1 && distribute::any_process(*strategy_, error != nullptr)) {
    // Every process stops here instead of waiting for the failed one.
    if (error) std::rethrow_exception(error);
    TANDEM_THROW(Error, "evaluation failed on another worker (its error is in its output)");
  }
  const std::vector<double> total = distribute::sum_over_replicas(*strategy_, sums);
  EvalResult result;
  result.examples = static_cast<int64_t>(total[1]);
  result.loss =
      result.examples > 0 ? total[0] / total[1] : std::numeric_limits<double>::quiet_NaN();
  std::vector<MetricSums> totals(metrics);
  for (size_t i = 0; i < metrics; ++i) totals[i] = {total[2 + 2 * i], total[3 + 2 * i]};
  result.metrics = metric_values(config_.metrics, totals);
  return result;
}

namespace detail {

void fold_partial_sums(distribute::Strategy& strategy, std::vector<double>& replica_losses,
                       std::vector<std::vector<MetricSums>>& metric_sums, double& loss_sum,
                       std::vector<MetricSums>& metrics) {
  std::vector<std::vector<double>> values;
  for (size_t r = 0; r < replica_losses.size(); ++r) {
    std::vector<double> v = {replica_losses[r]};
    for (const MetricSums& m : metric_sums[r]) {
      v.push_back(m.sum);
      v.push_back(m.count);
    }
    values.push_back(std::move(v));
    replica_losses[r] = 0.0;
    std::fill(metric_sums[r].begin(), metric_sums[r].end(), MetricSums{});
  }
  const std::vector<double> total = distribute::sum_over_replicas(strategy, values);
  loss_sum += total[0];
  for (size_t i = 0; i < metrics.size(); ++i) {
    metrics[i].sum += total[1 + 2 * i];
    metrics[i].count += total[2 + 2 * i];
  }
}

}  // namespace detail

void Trainer::check_fresh_output() {
  if (elastic_ && elastic_->awaiting_state) return;  // a joiner takes the members' run
  // The chief checks; every process learns the answer, so none waits for
  // a chief that gave up.
  const bool exists = strategy_->is_chief() && !config_.output_dir.empty() &&
                      std::filesystem::exists(checkpoint_path());
  if (processes_of(*strategy_) > 1 ? distribute::any_process(*strategy_, exists) : exists) {
    TANDEM_THROW(InvalidArgument, "'", checkpoint_path(),
                 "' already exists: resume it or choose "
                 "another output directory rather than overwrite it");
  }
}

void Trainer::begin_fit(const data::Dataset& train, Progress& progress, TrainResult& result) {
  progress.metrics.assign(config_.metrics.size(), {});
  reset_metric_sums();
  const bool joining = elastic_ && elastic_->awaiting_state;
  if (joining) {
    adopt_shared_state(progress, result);  // the members' position and schedule too
  } else if (config_.resume) {
    prepare_resume();
    const std::unique_ptr<PendingResume> pending = std::move(pending_resume_);
    {
      MemoryCategoryScope loading(MemoryCategory::workspace);  // as prepare_resume()'s
      engine_->load_state(pending->checkpoint);
    }
    progress = std::move(pending->progress);
    result.history = std::move(pending->history);
  } else {
    check_fresh_output();
  }
  progress.replica_losses.assign(static_cast<size_t>(strategy_->local_replicas()), 0.0);
  result.resumed_from_step = progress.global_step;
  if (!config_.output_dir.empty() && strategy_->is_chief()) {
    std::error_code error;
    std::filesystem::create_directories(config_.output_dir, error);
    if (error) {
      TANDEM_THROW(IoError, "cannot create output directory '", config_.output_dir,
                   "': ", error.message());
    }
  }
  check_batch_fits(config_, train);
  if (!joining) steps_per_epoch_ = steps_per_epoch(train);
  make_schedule(steps_per_epoch_);
  if (elastic_ && !joining) {
    check_elastic_settings();
    copy_state(progress, result.history);  // the first rollback point
    elastic_->last_step_end = Clock::now();
  }
  // Once nothing can refuse the resume: the summary of the run's earlier
  // part would stand for the whole run should this part be killed (tandem
  // report read its figures); the run writes it anew when it ends.
  if (config_.resume && !joining && strategy_->is_chief() && !config_.output_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove(RunDirectory(config_.output_dir).summary(), ignored);
  }
  for (int r = 0; r < strategy_->local_replicas(); ++r) engine_->model(r).train();
  // Track names for traces: the input is assembled on this thread.
  const std::thread::id main_thread = std::this_thread::get_id();
  trace::set_thread_name("input (main thread)");
  strategy_->run([&](int r) {
    // One device runs its replica on this thread, which also assembles input.
    trace::set_thread_name(
        "replica " + std::to_string(strategy_->global_replica(r)) +
        (std::this_thread::get_id() == main_thread ? " + input (main thread)" : ""));
  });
}

void Trainer::absorb(const distribute::StepResult& r, Progress& progress) {
  // An asynchronous engine may report no finished work yet (0 rows).
  const bool finite = r.global_rows == 0 || std::isfinite(r.loss);
  if (!finite && engine_->loss_scaler() == nullptr) {
    TANDEM_THROW(Diverged, "training diverged: loss is ", r.loss, " at epoch ", progress.epoch + 1,
                 " step ", progress.step + 1, " (lower the learning rate)");
  }
  // Under loss scaling a non-finite step is skipped, and the scale falls
  // until steps pass again (15 halvings from 2^15 to 1 at most). Past that,
  // nothing will: the run ends with an error rather than train on without
  // ever updating the weights.
  // A result without rows (the epoch's synchronize, an asynchronous
  // engine's empty report) says nothing either way: it reset the count at
  // every epoch's end.
  int64_t& stalled = progress.steps_without_update;
  if (r.global_rows > 0) stalled = finite && !r.skipped ? 0 : stalled + 1;
  if (stalled >= kMaxStepsWithoutUpdate) {
    TANDEM_THROW(Diverged, "training diverged: the last ", stalled, " steps applied no update (",
                 finite ? "gradients overflowed" : "the loss is ",
                 finite ? "" : std::to_string(r.loss), ", loss scale ", r.loss_scale, ") at epoch ",
                 progress.epoch + 1, " step ", progress.step + 1,
                 " (lower the learning rate or the loss scale)");
  }
  if (finite) {
    for (size_t i = 0; i < r.replica_loss_sums.size(); ++i)
      progress.replica_losses[i] += r.replica_loss_sums[i];
    progress.examples += r.global_rows;
  } else {
    ++progress.nonfinite_steps;
  }
  // The step's metrics, kept only with its loss (accuracy counted the rows
  // of skipped steps that the loss and examples leave out).
  for (size_t replica = 0; replica < step_metric_sums_.size(); ++replica) {
    for (size_t i = 0; i < step_metric_sums_[replica].size(); ++i) {
      if (finite) metric_sums_[replica][i] += step_metric_sums_[replica][i];
      step_metric_sums_[replica][i] = MetricSums{};
    }
  }
  const auto add = [](std::vector<int64_t>& into, const std::vector<int64_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
  };
  add(progress.staleness, r.staleness);
  add(progress.dropped_examples, r.dropped_rows);
  // Worker processes' metric sums, (sum, count) per metric (serve_remote_work).
  for (size_t replica = 0; replica < r.replica_reports.size(); ++replica) {
    const std::vector<double>& v = r.replica_reports[replica];
    std::vector<MetricSums>& sums = metric_sums_.at(replica);
    for (size_t i = 0; i < sums.size() && 2 * i + 1 < v.size(); ++i)
      sums[i] += MetricSums{v[2 * i], v[2 * i + 1]};
  }
}

void Trainer::serve_remote_work() {
  std::vector<MetricSums>& sums = metric_sums_.front();
  strategy_->serve_remote_work(engine_->model(0), training_forward(), engine_options(), [&sums] {
    std::vector<double> flat;
    for (MetricSums& m : sums) {
      flat.push_back(m.sum);
      flat.push_back(m.count);
      m = {};
    }
    return flat;
  });
}

void Trainer::synchronize_engine(Progress& progress) {
  const auto start = Clock::now();
  absorb(engine_->synchronize(), progress);
  progress.train_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

void Trainer::train_step(const StepInput& in, const distribute::ForwardFn& forward,
                         Progress& progress, const TrainCallbacks& callbacks) {
  const double lr = schedule_->lr(progress.global_step);
  const bool measure =
      config_.noise_scale_every > 0 && progress.global_step % config_.noise_scale_every == 0;
  const distribute::StepResult r = engine_->step(in.batch, forward,
                                                 {.step = progress.global_step,
                                                  .measure_gradient_norms = measure,
                                                  .learning_rate = lr,
                                                  .global_rows = in.global_rows});
  if (r.gradient_norms) progress.noise_scale.add(*r.gradient_norms);
  absorb(r, progress);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - in.start).count();
  progress.train_seconds += step_seconds;
  progress.learning_rate = lr;
  if (elastic_) elastic_->last_step_end = Clock::now();
  ++progress.step;
  ++progress.global_step;
  if (callbacks.on_batch) {
    callbacks.on_batch({.batch = in.batch,
                        .epoch = progress.epoch,
                        .global_step = progress.global_step,
                        .generation = elastic_ ? elastic_->group->membership().generation : 0});
  }
  // Fault tests lose a worker right after a given step.
  tandem::detail::maybe_raise_test_fault("TANDEM_TEST_KILL_AT_STEP", comm::launched_rank(),
                                         progress.global_step);
  if (!callbacks.on_step) return;
  callbacks.on_step(
      {.epoch = progress.epoch + 1,
       .step = progress.step,
       .steps_per_epoch = steps_per_epoch_,
       .global_step = progress.global_step,
       .loss = r.loss,
       .learning_rate = lr,
       .batch_examples = r.global_rows,
       .input_seconds = std::chrono::duration<double>(in.input_done - in.start).count(),
       .step_seconds = step_seconds,
       .exposed_communication_seconds = r.exposed_communication_seconds,
       .idle_seconds = r.idle_seconds,
       .replicas = r.replicas,
       .buckets = r.buckets,
       .loss_scale = r.loss_scale,
       // A step skipped for an overflow measured no norm: inf, not the
       // norm of the step before (the engine keeps that one).
       .gradient_norm = config_.engine.optimizer.global_clip_norm <= 0.0
                            ? std::numeric_limits<double>::quiet_NaN()
                        : r.skipped ? std::numeric_limits<double>::infinity()
                                    : r.gradient_norm,
       .noise_scale = progress.noise_scale.noise_scale(),
       .skipped = r.skipped});
}

TrainResult Trainer::fit(const data::Dataset& train, const std::optional<data::Dataset>& validation,
                         const TrainCallbacks& callbacks) {
  // A stop asked for before this fit reached its loop (a signal while it
  // set up) stands; once the fit ends, it is spent. (Cleared when the fit
  // began, it was lost: the run printed "saving a checkpoint" and trained
  // on.)
  struct SpendStop {
    std::atomic<bool>& flag;
    ~SpendStop() { flag.store(false); }
  } spend{stop_requested_};
  try {
    return run_fit(train, validation, callbacks);
  } catch (const PeerFailed&) {
    throw;  // another replica's failure, already known to every rank
  } catch (const std::exception& e) {
    // Whatever failed here (a checkpoint write, a callback, the input), the
    // other workers must not wait for this one in their next collective.
    // (An elastic job's change of membership may have failed between
    // strategies: its group's communicator is the one to break then.)
    if (strategy_) {
      strategy_->abort(
          tandem::detail::concat("worker ", process_index_of(*strategy_), " failed: ", e.what()));
    }
    throw;
  }
}

TrainResult Trainer::run_fit(const data::Dataset& train,
                             const std::optional<data::Dataset>& validation,
                             const TrainCallbacks& callbacks) {
  const auto run_start = Clock::now();
  TrainResult result;
  Progress progress;
  begin_fit(train, progress, result);
  // The main thread builds batches between steps. With replica threads on
  // every core it must not start OpenMP teams: their workers spin after each
  // region and steal a replica's core. With one replica it has that
  // replica's threads, not the OpenMP default (every core of the machine),
  // which other processes of the job or of the host may be using.
  NumThreadsScope main_threads(strategy_->local_replicas() > 1 ? 1
                                                               : strategy_->threads_per_replica());
  Input input;
  open_input(input, train, progress);
  // The rate of the last step trained, as the uninterrupted run holds it
  // here (a run resumed after an epoch's last step reported the next
  // step's rate for that epoch).
  progress.learning_rate = schedule_->lr(std::max<int64_t>(progress.global_step - 1, 0));
  const distribute::ForwardFn forward = training_forward();
  const int64_t last_epoch =
      config_.stop_after_epochs > 0 ? config_.stop_after_epochs : config_.epochs;
  while (progress.epoch < last_epoch) {
    EpochEnd end = EpochEnd::done;
    std::string change;  // why an elastic job's membership changes
    try {
      end = run_epoch(input, progress, result, forward, validation, callbacks);
      if (end == EpochEnd::joiners) {
        copy_state(progress, result.history);  // nothing is taken again
        change = "a worker asked to join";
      }
    } catch (const PeerFailed& e) {
      if (!elastic_) throw;
      change = e.what();
    }
    if (!change.empty()) {
      // Replaying to the position may be collective (repeated data): a
      // member lost meanwhile is one more change of membership.
      for (bool opened = false; !opened;) {
        change_membership(progress, result, change, callbacks);
        try {
          open_input(input, train, progress);
          opened = true;
        } catch (const PeerFailed& e) {
          change = e.what();
        }
      }
      continue;
    }
    if (end == EpochEnd::stop) {
      result.interrupted = true;
      break;
    }
    if (end == EpochEnd::input_exhausted) {
      result.input_exhausted = true;
      break;
    }
  }
  result.paused = !result.interrupted && progress.epoch < config_.epochs && !result.input_exhausted;
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

Trainer::EpochEnd Trainer::run_epoch(Input& input, Progress& progress, TrainResult& result,
                                     const distribute::ForwardFn& forward,
                                     const std::optional<data::Dataset>& validation,
                                     const TrainCallbacks& callbacks) {
  const bool continuing = config_.steps_per_epoch > 0;
  bool exhausted = false;
  while (!continuing || progress.step < config_.steps_per_epoch) {
    const StepInput next = next_step_input(input, progress);
    if (next.status == StepInput::Status::joiners) return EpochEnd::joiners;
    if (next.status == StepInput::Status::stop) {
      synchronize_engine(progress);
      save(progress, result.history);
      return EpochEnd::stop;
    }
    if (next.status == StepInput::Status::end_of_data) {
      exhausted = continuing;
      break;
    }
    train_step(next, forward, progress, callbacks);
    if (config_.checkpoint_every > 0 && !config_.output_dir.empty() &&
        progress.global_step % config_.checkpoint_every == 0) {
      // The replicas' partial sums go into the live position (save folds
      // a copy and would drop them from this epoch's figures).
      synchronize_engine(progress);
      detail::fold_partial_sums(*strategy_, progress.replica_losses, metric_sums_,
                                progress.loss_sum, progress.metrics);
      save(progress, result.history);
    }
    if (elastic_ && progress.global_step % config_.elastic_copy_every == 0)
      copy_state(progress, result.history);
  }
  // A continuing pass that ended before this epoch's first step (a run
  // resumed after its data ran out): no epoch to close (each resume added
  // an empty one and moved the checkpoint on).
  if (exhausted && progress.step == 0) return EpochEnd::input_exhausted;
  synchronize_engine(progress);
  EpochResult epoch = finish_epoch(progress, validation);
  epoch.input_stages = input.batches.stats();
  result.history.push_back(epoch);
  // The next epoch's start (a continuing pass keeps its global step).
  Progress next;
  next.epoch = progress.epoch + 1;
  next.global_step = progress.global_step;
  next.learning_rate = progress.learning_rate;
  next.steps_without_update = progress.steps_without_update;  // counts across epochs
  next.noise_scale = progress.noise_scale;
  next.metrics.assign(config_.metrics.size(), {});
  next.replica_losses.assign(progress.replica_losses.size(), 0.0);
  if (!config_.output_dir.empty()) save(next, result.history);
  if (callbacks.on_epoch) callbacks.on_epoch(epoch);
  progress = std::move(next);
  if (elastic_ && progress.epoch < config_.epochs) copy_state(progress, result.history);
  if (exhausted) return EpochEnd::input_exhausted;
  if (!continuing) input.iterator = input.batches.iterator(progress.epoch);
  return EpochEnd::done;
}

EpochResult Trainer::finish_epoch(Progress& progress,
                                  const std::optional<data::Dataset>& validation) {
  detail::fold_partial_sums(*strategy_, progress.replica_losses, metric_sums_, progress.loss_sum,
                            progress.metrics);
  EpochResult epoch;
  epoch.epoch = progress.epoch + 1;
  epoch.train_examples = progress.examples;
  epoch.nonfinite_steps = progress.nonfinite_steps;
  epoch.train_loss = progress.examples > 0
                         ? progress.loss_sum / static_cast<double>(progress.examples)
                         : std::numeric_limits<double>::quiet_NaN();
  epoch.train_metrics = metric_values(config_.metrics, progress.metrics);
  epoch.train_seconds = progress.train_seconds;
  epoch.learning_rate = progress.learning_rate;
  epoch.examples_per_second = progress.examples / std::max(progress.train_seconds, 1e-9);
  epoch.noise_scale = progress.noise_scale.noise_scale();
  epoch.staleness = progress.staleness;
  epoch.dropped_examples = progress.dropped_examples;
  if (const precision::LossScaler* scaler = engine_->loss_scaler()) {
    epoch.loss_scale = scaler->scale();
    epoch.skipped_steps = scaler->skipped_steps();
    epoch.steps_since_overflow = scaler->steps_since_overflow();
  }
  if (validation) {
    const EvalResult v = evaluate(*validation);
    epoch.validation_loss = v.loss;
    epoch.validation_metrics = v.metrics;
    epoch.validated = true;
  } else {
    epoch.validation_loss = std::numeric_limits<double>::quiet_NaN();
  }
  return epoch;
}

}  // namespace tandem::train
