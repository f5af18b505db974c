#pragma once
// A hyperparameter search (`tandem tune search`): the trials of a search
// space (tune/search_space.h), scheduled by ASHA (tune/asha.h) onto
// `parallel` workers. Each trial is a normal run directory
// (OUTPUT/trial-NNN: checkpoint, metrics, summary), trained rung by rung:
// a promoted trial resumes from its checkpoint. OUTPUT/search.json holds
// every trial's state after each event, so that an interrupted search
// resumes where it stopped without retraining a finished rung.
//
// How a trial runs is the TrialRunner's: `tandem tune search` starts a
// `tandem train` process per job; tests use an in-memory runner.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/tune/search_space.h"

namespace tandem::tune {

// One rung of one trial to train.
struct TrialJob {
  int64_t trial = 0;
  int64_t rung = 0;
  int64_t epochs = 0;           // train up to this epoch (stop there, checkpoint saved)
  int64_t max_epochs = 0;       // the run's length: its schedule spans this many
  int64_t steps_per_epoch = 0;  // budgets in steps: epochs of this many steps, data repeated
  TrialSettings settings;
  uint64_t seed = 0;
  std::string dir;  // the trial's run directory
};

struct TrialOutcome {
  // diverged: the trial's settings made training diverge (a result, the
  // worst, not a failure of the search).
  enum class Status { finished, diverged, interrupted, failed };
  Status status = Status::failed;
  std::vector<double> curve;  // the search's metric after every epoch so far
  double seconds = 0.0;       // this job's wall time
  std::string error;          // diverged, failed: why
};

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual void start(const TrialJob& job) = 0;
  // Blocks until a started job ends.
  virtual std::pair<TrialJob, TrialOutcome> wait() = 0;
};

struct TrialRecord {
  TrialSettings settings;
  uint64_t seed = 0;
  std::vector<double> results;  // the metric at the end of each finished rung (NaN: diverged)
  int64_t started_rung = -1;
  bool failed = false;
  std::string error;
  std::vector<double> curve;  // by epoch
  double seconds = 0.0;       // trained so far, over all its jobs
};

struct SearchOptions {
  SearchSpace space;
  std::string space_text;  // saved with the state: a resume checks it is unchanged
  // What else each trial runs with (tandem train's flags): saved too, and a
  // resume refuses others (promoted trials would resume under settings
  // their checkpoints refuse, and new trials mix them with the old).
  std::vector<std::string> trial_arguments;
  std::string output_dir;
  int64_t parallel = 1;  // jobs at once
  bool resume = false;
  const std::atomic<bool>* stop = nullptr;  // set: start no new job
  // Each event (a job started, ended), as a line for the user.
  std::function<void(const std::string&)> log;
};

struct SearchResult {
  std::vector<TrialRecord> trials;
  std::vector<int64_t> rungs;  // epochs
  int64_t best = -1;           // trial index (AshaScheduler::best: the best finite result
  int64_t best_rung = -1;      // at the highest rung that has one), and that rung
  int64_t epochs_trained = 0;  // over every trial: the search's compute
  double trial_seconds = 0.0;
  double wall_seconds = 0.0;
  bool interrupted = false;
  bool target_reached = false;  // settings.target set and the best reached it
};

// The trial's run directory in the search's output.
std::string trial_dir(const std::string& output_dir, int64_t trial);

// Runs (or resumes) the search. Throws InvalidArgument when OUTPUT holds a
// search and resume is false (or holds none, or another space's, and it is
// true); Error when the first job to end failed (its error), so that a bad
// flag stops the search rather than every trial.
SearchResult run_search(const SearchOptions& options, TrialRunner& runner);

// The state saved in OUTPUT/search.json, as run_search leaves it.
SearchResult load_search(const std::string& output_dir);

}  // namespace tandem::tune
