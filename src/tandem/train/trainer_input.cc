// The Trainer's training input: this process's shard of the data in
// batches, the pass over them at a position, and what every process agrees
// on before each step (trainer.h's input contract).
#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/base/trace.h"
#include "tandem/distribute/agreement.h"
#include "tandem/train/detail/trainer_state.h"

namespace tandem::train {

using detail::process_index_of;
using detail::processes_of;

namespace {

using Clock = std::chrono::steady_clock;

int64_t rows_of(const data::Element& e) {
  const Tensor& first = e.features().front().second;
  return first.rank() == 0 ? 0 : first.dim(0);
}

// The features of `batch` with no rows: what a process whose input has ended
// trains on while the others finish.
data::Element empty_like(const data::Element& batch) {
  data::Element out;
  for (const auto& [name, t] : batch.features()) out.set(name, t.slice(0, 0));
  return out;
}

// What every process learns before a step: whether any process still has a
// batch, the global batch's rows, and whether to stop. A process whose
// input failed makes every process stop with an error.
struct StepAgreement {
  int64_t batches = 0;  // processes with a batch
  int64_t rows = 0;
  bool stop = false;
  bool joiners = false;  // an elastic job has joiners waiting
  int failed_process = -1;
  int process_without_template = -1;  // has no batch and never had one
};

StepAgreement agree_on_step(distribute::Strategy& strategy, bool has_batch, int64_t rows, bool stop,
                            bool failed, bool no_template, bool joiners) {
  constexpr size_t kFields = 6;
  const int64_t mine[kFields] = {has_batch ? 1 : 0,   rows,           stop ? 1 : 0, failed ? 1 : 0,
                                 no_template ? 1 : 0, joiners ? 1 : 0};
  StepAgreement a;
  if (processes_of(strategy) == 1) {
    a = {mine[0], mine[1], stop, joiners, failed ? 0 : -1, no_template ? 0 : -1};
    return a;
  }
  const std::vector<int64_t> all = distribute::gather_over_processes(strategy, mine);
  for (size_t p = 0; p * kFields < all.size(); ++p) {
    const int64_t* v = all.data() + kFields * p;
    a.batches += v[0];
    a.rows += v[1];
    a.stop = a.stop || v[2] != 0;
    if (v[3] != 0 && a.failed_process < 0) a.failed_process = static_cast<int>(p);
    if (v[4] != 0 && a.process_without_template < 0)
      a.process_without_template = static_cast<int>(p);
    a.joiners = a.joiners || v[5] != 0;
  }
  return a;
}

// Whether a global batch of `rows` rows is the job's remainder to drop:
// with drop_remainder each process drops only its own, so a global batch
// that is not whole (a process's shard ended first) is the job's.
bool is_job_remainder(const TrainConfig& config, distribute::Strategy& strategy, int64_t rows) {
  return config.drop_remainder && processes_of(strategy) > 1 && rows < config.batch_size;
}

}  // namespace

data::Dataset Trainer::batched(const data::Dataset& examples, int64_t batch_size,
                               bool drop_remainder) const {
  const int processes = processes_of(*strategy_);
  const data::Dataset shard =
      data::auto_shard(examples, processes, process_index_of(*strategy_), config_.auto_shard);
  if (!config_.padding) return shard.batch(batch_size, drop_remainder);
  data::PaddedBatchOptions padding = *config_.padding;
  padding.drop_remainder = drop_remainder;
  return shard.padded_batch(batch_size, padding);
}

data::Dataset Trainer::process_batches(const data::Dataset& train) const {
  const int processes = processes_of(*strategy_);
  data::Dataset d = batched(train, config_.batch_size / processes, config_.drop_remainder);
  if (config_.batch_transform) {
    // Each process draws its own numbers: seeded alike, the processes'
    // batches (rows r of batch k on every process) took the same flips and
    // crops. One process keeps the seed as it was.
    const int process = process_index_of(*strategy_);
    const uint64_t seed =
        process == 0 ? config_.engine.seed : mix_seed(config_.engine.seed, 0x9E37ull + process);
    d = d.map(
        [transform = config_.batch_transform, seed](data::Element batch) {
          const int64_t rows = rows_of(batch);
          // Seeded from the batch's position in the pass (the epoch): the same
          // numbers whichever thread runs it and whenever (prefetch, resume).
          thread_generator().set_state(mix_seed(seed ^ 0xB47Cull, data::element_random_seed()), 0);
          data::Element out = transform(std::move(batch));
          for (const auto& [name, t] : out.features()) {
            if (t.rank() == 0 || t.dim(0) != rows) {
              TANDEM_THROW(InvalidArgument, "batch_transform changed the batch from ", rows,
                           " rows to ", t.to_string(), " in feature '", name, "'");
            }
          }
          return out;
        },
        {.num_parallel_calls = config_.input_parallel_calls});
  }
  if (config_.prefetch_batches != 0) d = d.prefetch(config_.prefetch_batches);
  return d;
}

int64_t Trainer::steps_per_epoch(const data::Dataset& train) {
  if (config_.steps_per_epoch > 0) return config_.steps_per_epoch;
  // A joiner learns it with the members' state in fit() (the members are
  // not in this collective).
  if (elastic_ && elastic_->awaiting_state) return steps_per_epoch_;
  const int processes = processes_of(*strategy_);
  const int64_t mine =
      batched(train, config_.batch_size / processes, config_.drop_remainder).cardinality();
  if (processes == 1) return mine == data::kInfiniteCardinality ? 0 : std::max<int64_t>(mine, 0);
  // The longest shard sets the epoch's steps (the others then train with
  // empty batches), or with drop_remainder the shortest (the first global
  // batch that is not whole ends the epoch); unknown anywhere is unknown.
  const std::vector<int64_t> all =
      distribute::gather_over_processes(*strategy_, std::span(&mine, 1));
  int64_t steps = config_.drop_remainder ? std::numeric_limits<int64_t>::max() : 0;
  for (int64_t s : all) {
    if (s < 0) return 0;
    steps = config_.drop_remainder ? std::min(steps, s) : std::max(steps, s);
  }
  return steps;
}

void Trainer::open_input(Input& input, const data::Dataset& train, const Progress& progress) {
  input = Input{.batches = process_batches(train)};
  // Batches before the position are read again and dropped: the pipeline's
  // state is where the uninterrupted run had it. A continuing pass
  // (steps_per_epoch) runs across epochs.
  const bool continuing = config_.steps_per_epoch > 0;
  input.iterator = input.batches.iterator(continuing ? 0 : progress.epoch);
  input.pass = continuing ? 0 : progress.epoch;
  const bool alone = processes_of(*strategy_) == 1;
  for (int64_t skip = continuing ? progress.global_step : progress.step; skip > 0; --skip) {
    // A long replay stops on request (alone: the processes replay in step).
    if ((alone && stop_requested_.load()) || !replay_step(input)) break;
  }
}

bool Trainer::replay_step(Input& input) {
  for (int tries = 0;; ++tries) {
    const std::optional<data::Element> batch = input.iterator.next();
    int64_t counts[2] = {batch ? 1 : 0, batch ? rows_of(*batch) : 0};  // batches, rows
    // Only where the job's pass boundary differs from this process's.
    if (processes_of(*strategy_) > 1 && (config_.repeat || config_.drop_remainder)) {
      const std::vector<int64_t> all = distribute::gather_over_processes(*strategy_, counts);
      counts[0] = counts[1] = 0;
      for (size_t i = 0; i < all.size(); ++i) counts[i % 2] += all[i];
    }
    if (counts[0] > 0 && !is_job_remainder(config_, *strategy_, counts[1])) return true;
    if (!config_.repeat || tries > 0) return false;
    input.start_next_pass();
  }
}

Trainer::StepInput Trainer::next_step_input(Input& input, const Progress& progress) {
  StepInput next;
  next.start = Clock::now();
  // With repeat, a pass ends for every process at once: the next starts
  // when the job's has ended (or left only a partial global batch to drop).
  for (int tries = 0;; ++tries) {
    std::optional<data::Element> batch;
    std::exception_ptr input_error;
    try {
      trace::Span span("input", "step");
      batch = input.iterator.next();
      if (batch && batch->size() == 0) TANDEM_THROW(InvalidArgument, "a batch has no features");
    } catch (...) {
      if (processes_of(*strategy_) == 1) throw;
      input_error = std::current_exception();
    }
    next.input_done = Clock::now();
    // Only one member need see a joiner (they all watch the same store).
    const bool joiners =
        elastic_ && elastic_->group->membership().rank == 0 && elastic_->group->joiners_waiting();
    const StepAgreement agreed = agree_on_step(
        *strategy_, batch.has_value(), batch ? rows_of(*batch) : 0, stop_requested_.load(),
        input_error != nullptr, !batch && !input.empty_batch && !input_error, joiners);
    if (agreed.failed_process >= 0) {
      if (input_error) std::rethrow_exception(input_error);
      TANDEM_THROW(Error, "worker ", agreed.failed_process,
                   " failed reading its training input (its error is in its output)");
    }
    if (agreed.stop || agreed.joiners) {
      // On joiners the batch read is dropped: the input is opened again
      // over the new membership at this step.
      next.status = agreed.stop ? StepInput::Status::stop : StepInput::Status::joiners;
      return next;
    }
    if (agreed.batches == 0 || is_job_remainder(config_, *strategy_, agreed.rows)) {
      if (config_.repeat && tries == 0) {
        input.start_next_pass();
        continue;
      }
      if (progress.global_step == 0)
        TANDEM_THROW(InvalidArgument, "the training data yielded no batches");
      next.status = StepInput::Status::end_of_data;
      return next;
    }
    if (agreed.process_without_template >= 0) {
      TANDEM_THROW(InvalidArgument, "worker ", agreed.process_without_template,
                   "'s shard of the training data is empty while others still have batches "
                   "(give every worker at least one example, or shard the data OFF)");
    }
    if (batch && !input.empty_batch) input.empty_batch = empty_like(*batch);
    next.batch = batch ? std::move(*batch) : *input.empty_batch;
    next.global_rows = agreed.rows;
    return next;
  }
}

}  // namespace tandem::train
