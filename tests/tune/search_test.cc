// The search's parts without training: the space file, the samplers, ASHA's
// promotions and budgets, and a search run by an in-memory runner whose
// trials have known curves (interrupted and resumed).
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "support/test_files.h"
#include "tandem/base/error.h"
#include "tandem/tune/asha.h"
#include "tandem/tune/search.h"
#include "tandem/tune/search_space.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGrid = R"([search]
sampler = "grid"
min_epochs = 1
max_epochs = 9
[space]
lr = { log_uniform = [0.01, 1.0], points = 3 }
weight-decay = { uniform = [0.0, 0.001], points = 3 }
model.width = { choice = [64, 128, 256] }
)";

void expect_space_error(const std::string& text, const std::string& needle) {
  try {
    tune::parse_search_space(text, "space.toml");
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SearchSpace, AGridIsEveryCombinationFirstParameterSlowest) {
  const tune::SearchSpace space = tune::parse_search_space(kGrid, "space.toml");
  ASSERT_EQ(space.parameters.size(), 3u);
  EXPECT_EQ(space.settings.trials, 27);
  EXPECT_TRUE(space.settings.maximize);  // validation_accuracy
  const std::vector<tune::TrialSettings> trials = tune::sample_trials(space);
  ASSERT_EQ(trials.size(), 27u);
  std::set<tune::TrialSettings> distinct(trials.begin(), trials.end());
  EXPECT_EQ(distinct.size(), 27u);
  EXPECT_EQ(trials[0],
            (tune::TrialSettings{{"lr", "0.01"}, {"weight-decay", "0"}, {"model.width", "64"}}));
  EXPECT_EQ(trials[1][2].second, "128");  // the last parameter varies fastest
  EXPECT_EQ(trials[9][0].second, "0.1");  // log-spaced: 0.01, 0.1, 1
  EXPECT_EQ(trials[3][1].second, "0.0005");
  EXPECT_EQ(tune::trial_arguments(trials[26]),
            (std::vector<std::string>{"--lr", "1", "--weight-decay", "0.001", "--model-options",
                                      "width=256"}));
}

TEST(SearchSpace, RandomDrawsAreSeededPerTrialAndStayInTheirRanges) {
  const std::string text = R"([search]
trials = 200
seed = 7
[space]
lr = { log_uniform = [0.001, 0.1] }
batch-size = { int = [16, 18] }
optimizer = { choice = ["sgd", "adam"] }
)";
  const tune::SearchSpace space = tune::parse_search_space(text, "s.toml");
  const std::vector<tune::TrialSettings> a = tune::sample_trials(space);
  EXPECT_EQ(a, tune::sample_trials(space));
  ASSERT_EQ(a.size(), 200u);
  std::map<std::string, int> batches, optimizers;
  int below_centre = 0;  // of the log range: 0.01
  for (const tune::TrialSettings& t : a) {
    const double lr = std::stod(t[0].second);
    EXPECT_GE(lr, 0.001);
    EXPECT_LE(lr, 0.1);
    below_centre += lr < 0.01;
    ++batches[t[1].second];
    ++optimizers[t[2].second];
  }
  EXPECT_EQ(batches.size(), 3u);  // 16, 17 and 18: both ends inclusive
  EXPECT_EQ(optimizers.size(), 2u);
  EXPECT_GT(below_centre, 70);  // about half, log-uniformly
  EXPECT_LT(below_centre, 130);
  tune::SearchSpace other = space;
  other.settings.seed = 8;
  EXPECT_NE(tune::sample_trials(other), a);
}

TEST(SearchSpace, BadFilesNameTheLineAndTheProblem) {
  expect_space_error("[space]\nlearning-rate = { uniform = [0, 1] }\n",
                     "space.toml:2: unknown parameter 'learning-rate'");
  expect_space_error("[search]\ntrials = 3\n[space]\nlr = { normal = [0, 1] }\n",
                     "space.toml:4: unknown distribution 'normal'");
  expect_space_error("[search]\ntrials = 3\n[space]\nlr = { uniform = [1, 1] }\n",
                     "space.toml:4: empty range for 'lr'");
  expect_space_error("[search]\ntrials = 3\n[space]\nlr = { log_uniform = [0, 1] }\n",
                     "needs low > 0");
  expect_space_error("[search]\nmax_epochs = 0\n", "space.toml:2: max_epochs (a budget)");
  expect_space_error("[search]\nmin_epochs = 5\nmax_epochs = 3\n[space]\nlr = {choice=[1]}\n",
                     "min_epochs 5 is above max_epochs 3");
  expect_space_error("[search]\nsampler = \"grid\"\n[space]\nlr = { uniform = [0, 1] }\n",
                     "needs points = N");
  expect_space_error("[space]\nbatch-size = { int = [1, 9223372036854775807] }\n",
                     "space.toml:2: int range of 'batch-size' must lie within [-2^53, 2^53]");
  // Refused before the grid's values are made (10^12 strings).
  expect_space_error(
      "[search]\nsampler = \"grid\"\n[space]\nlr = { log_uniform = [0.01, 1.0], points = "
      "1000000000000 }\n",
      "space.toml:4: points must be in [1, 100000], got 1000000000000");
  expect_space_error("[space]\nlr = { uniform = [0, 1] }\n", "random sampling needs trials");
  expect_space_error("[search]\nsampler = \"grid\"\ntrials = 4\n[space]\nlr = {choice=[1,2]}\n",
                     "trials = 4 but the grid has 2 points");
  expect_space_error("[search]\ntrials = 3\nbudget = 2\n",
                     "space.toml:3: unknown setting 'budget'");
  expect_space_error("[search]\ntrials = 3\n", "no [space]");
  expect_space_error("[space\n", "space.toml:1: invalid TOML");
  expect_space_error("[search]\ntrials = 3\n[" + testing::repeated("a.", 100000) + "b]\n",
                     "space.toml:3: invalid TOML: a dotted key of more than 256 parts");
  expect_space_error("[search]\nmode = \"maximum\"\n", "unknown mode 'maximum'");
  expect_space_error("[search]\nmetric = \"accuracy\"\n", "not an epoch figure");
  // Budgets in steps.
  expect_space_error("[search]\nmin_steps = 100\nmax_steps = 900\nmax_epochs = 3\n",
                     "space.toml:4: budgets in epochs and in steps");
  expect_space_error("[search]\nmin_steps = 100\n[space]\nlr = {choice=[1]}\n",
                     "space.toml:2: budgets in steps need both min_steps and max_steps");
  expect_space_error("[search]\nmin_steps = 100\nmax_steps = 950\n[space]\nlr = {choice=[1]}\n",
                     "max_steps 950 is not a multiple of min_steps 100");
  expect_space_error("[search]\nmin_steps = 900\nmax_steps = 300\n[space]\nlr = {choice=[1]}\n",
                     "min_steps 900 is above max_steps 300");
  expect_space_error("[search]\nmin_steps = 0\nmax_steps = 300\n", "min_steps (a budget)");
}

TEST(SearchSpace, BudgetsInStepsAreEpochsOfMinStepsSteps) {
  const tune::SearchSpace space = tune::parse_search_space(
      "[search]\nsampler = \"grid\"\nmin_steps = 300\nmax_steps = 2700\n[space]\n"
      "lr = { choice = [0.1] }\n",
      "space.toml");
  EXPECT_EQ(space.settings.steps_per_epoch, 300);
  EXPECT_EQ(space.settings.min_epochs, 1);
  EXPECT_EQ(space.settings.max_epochs, 9);
  EXPECT_EQ(tune::budget_point(space.settings.steps_per_epoch, 3), "step 900");
  EXPECT_EQ(tune::budget_point(0, 3), "epoch 3");
}

TEST(Asha, RungsGrowByTheReductionFactorUpToTheMaximum) {
  EXPECT_EQ(tune::rung_epochs({.min_epochs = 1, .max_epochs = 9, .reduction_factor = 3}),
            (std::vector<int64_t>{1, 3, 9}));
  EXPECT_EQ(tune::rung_epochs({.min_epochs = 1, .max_epochs = 10, .reduction_factor = 3}),
            (std::vector<int64_t>{1, 3, 9, 10}));
  EXPECT_EQ(tune::rung_epochs({.min_epochs = 2, .max_epochs = 2, .reduction_factor = 2}),
            (std::vector<int64_t>{2}));
  EXPECT_EQ(tune::rung_epochs({.min_epochs = 1, .max_epochs = 9, .successive_halving = false}),
            (std::vector<int64_t>{9}));
}

// A trial that diverged at the highest rung (NaN) is not the best: the best
// finite result at the highest rung that has one is (the search printed the
// diverged trial and its NaN as the best).
TEST(Asha, TheBestIsTheBestFiniteResultAtTheHighestRungThatHasOne) {
  tune::AshaScheduler asha({.trials = 3, .min_epochs = 1, .max_epochs = 3});
  asha.restore(0, {.results = {0.5, NAN}, .started_rung = 1});
  asha.restore(1, {.results = {0.7}, .started_rung = 0});
  asha.restore(2, {.results = {0.6}, .started_rung = 0});
  EXPECT_EQ(asha.best().trial, 1);
  EXPECT_EQ(asha.best().rung, 0);
  asha.restore(1, {.results = {NAN}, .started_rung = 0});
  asha.restore(2, {.results = {NAN}, .started_rung = 0});
  asha.restore(0, {.results = {NAN, NAN}, .started_rung = 1});
  EXPECT_EQ(asha.best().trial, -1);
}

TEST(Asha, PromotesTheTopThirdOfEachRungOneWorkerAtATime) {
  // Nine trials, quality = trial index (higher is better), run one at a time.
  tune::AshaScheduler asha({.trials = 9, .min_epochs = 1, .max_epochs = 9});
  std::vector<std::pair<int64_t, int64_t>> order;  // (trial, rung)
  while (std::optional<tune::AshaScheduler::Job> job = asha.next()) {
    order.emplace_back(job->trial, job->rung);
    asha.report(*job, static_cast<double>(job->trial) + 0.1 * static_cast<double>(job->rung));
  }
  EXPECT_TRUE(asha.done());
  // Asynchronous: after three results, the best of them is promoted at once.
  ASSERT_GE(order.size(), 4u);
  EXPECT_EQ(order[3], (std::pair<int64_t, int64_t>{2, 1}));
  std::map<int64_t, int64_t> reached;  // trial -> highest rung
  for (const auto& [t, rung] : order) reached[t] = std::max(reached[t], rung);
  EXPECT_EQ(reached[8], 2);  // the best trial trains to the end
  EXPECT_EQ(asha.best().trial, 8);
  EXPECT_EQ(asha.best().rung, 2);
  int64_t epochs = 0;
  for (const auto& [t, rung] : order) epochs += asha.rungs()[static_cast<size_t>(rung)];
  for (const auto& [t, rung] : order)
    if (rung > 0) epochs -= asha.rungs()[static_cast<size_t>(rung - 1)];  // resumed, not retrained
  // Trials in rising order of quality are ASHA's worst case (each new one
  // beats every earlier one and is promoted), yet fewer epochs than all.
  EXPECT_LT(epochs, 9 * 9);
}

TEST(Asha, NeverPromotesADivergedTrial) {
  tune::AshaScheduler asha({.trials = 3, .min_epochs = 1, .max_epochs = 3});
  for (int i = 0; i < 3; ++i) {
    const auto job = asha.next();
    ASSERT_TRUE(job);
    asha.report(*job, job->trial == 0 ? NAN : 0.5);  // trial 0 would "win" a naive max
  }
  const auto promoted = asha.next();
  ASSERT_TRUE(promoted);
  EXPECT_EQ(promoted->trial, 1);
  EXPECT_EQ(promoted->rung, 1);
}

// Trials whose metric after epoch e is q (1 - 2^-e), q from the trial's lr;
// the runner keeps each trial's trained epochs as a checkpoint would.
class FakeRunner : public tune::TrialRunner {
 public:
  explicit FakeRunner(int64_t interrupt_after = -1) : interrupt_after_(interrupt_after) {}

  void start(const tune::TrialJob& job) override {
    fs::create_directories(job.dir);  // as a trial's run directory
    queue_.push_back(job);
  }

  std::pair<tune::TrialJob, tune::TrialOutcome> wait() override {
    tune::TrialJob job = queue_.front();
    queue_.pop_front();
    tune::TrialOutcome out;
    if (interrupt_after_ >= 0 && jobs_ >= interrupt_after_) {
      // Half the rung trained, then Ctrl-C: the checkpoint holds it.
      int64_t& done = trained_[job.dir];
      const int64_t half = done + (job.epochs - done) / 2;
      epochs_trained += half - done;
      done = half;
      out.status = tune::TrialOutcome::Status::interrupted;
      return {job, out};
    }
    ++jobs_;
    int64_t& done = trained_[job.dir];
    EXPECT_LT(done, job.epochs) << job.dir << " retrains a finished rung";
    epochs_trained += job.epochs - done;
    done = job.epochs;
    const double q = std::stod(job.settings[0].second);
    if (q > 100) {
      out.status = tune::TrialOutcome::Status::diverged;
      out.error = "training diverged";
      return {job, out};
    }
    for (int64_t e = 1; e <= done; ++e) out.curve.push_back(q * (1.0 - std::pow(0.5, e)));
    out.status = tune::TrialOutcome::Status::finished;
    return {job, out};
  }

  // This runner's checkpoints, counting anew and never interrupting.
  FakeRunner resumed() const {
    FakeRunner r = *this;
    r.interrupt_after_ = -1;
    r.epochs_trained = 0;
    return r;
  }

  int64_t epochs_trained = 0;

 private:
  std::deque<tune::TrialJob> queue_;
  std::map<std::string, int64_t> trained_;
  int64_t interrupt_after_;
  int64_t jobs_ = 0;
};

constexpr const char* kQualities = R"([search]
sampler = "grid"
min_epochs = 1
max_epochs = 9
metric = "validation_accuracy"
[space]
lr = { choice = [0.3, 0.9, 0.5, 0.1, 0.8, 0.2, 0.7, 0.4, 0.6] }
)";

tune::SearchOptions options(const std::string& dir, const char* text, int64_t parallel) {
  return {.space = tune::parse_search_space(text, "space.toml"),
          .space_text = text,
          .output_dir = dir,
          .parallel = parallel};
}

TEST(Search, FindsTheBestTrialForAFractionOfTheGridsEpochs) {
  const std::string dir = (fs::path(TANDEM_TEST_TMPDIR) / "search_best").string();
  fs::remove_all(dir);
  FakeRunner runner;
  const tune::SearchResult r = tune::run_search(options(dir, kQualities, 3), runner);
  EXPECT_EQ(r.best, 1);  // lr 0.9
  EXPECT_EQ(r.trials[1].results.size(), 3u);
  EXPECT_EQ(r.epochs_trained, runner.epochs_trained);
  EXPECT_LT(r.epochs_trained, 9 * 9 * 2 / 5);
  EXPECT_FALSE(r.interrupted);
  // The saved state says the same.
  const tune::SearchResult saved = tune::load_search(dir);
  EXPECT_EQ(saved.best, 1);
  EXPECT_EQ(saved.epochs_trained, r.epochs_trained);
  // A second search in the same directory is refused; so is a resume of none.
  FakeRunner again;
  EXPECT_THROW(tune::run_search(options(dir, kQualities, 3), again), InvalidArgument);
  // Trial directories left without the search's state are not reused.
  fs::remove(fs::path(dir) / "search.json");
  EXPECT_THROW(tune::run_search(options(dir, kQualities, 3), again), InvalidArgument);
  tune::SearchOptions none = options(dir + "-none", kQualities, 1);
  none.resume = true;
  EXPECT_THROW(tune::run_search(none, again), InvalidArgument);
}

TEST(Search, AnInterruptedSearchResumesWithoutRetrainingAFinishedRung) {
  const std::string dir = (fs::path(TANDEM_TEST_TMPDIR) / "search_resume").string();
  const std::string whole_dir = dir + "-whole";
  fs::remove_all(dir);
  fs::remove_all(whole_dir);
  FakeRunner whole;
  const tune::SearchResult uninterrupted =
      tune::run_search(options(whole_dir, kQualities, 1), whole);

  FakeRunner first(/*interrupt_after=*/7);
  const tune::SearchResult stopped = tune::run_search(options(dir, kQualities, 1), first);
  EXPECT_TRUE(stopped.interrupted);
  // The trials' checkpoints carry over; nothing interrupts this time.
  FakeRunner continued = first.resumed();
  tune::SearchOptions resume = options(dir, kQualities, 1);
  resume.resume = true;
  const tune::SearchResult r = tune::run_search(resume, continued);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.best, uninterrupted.best);
  // Every epoch trained once over both runs, as in the uninterrupted search.
  EXPECT_EQ(first.epochs_trained + continued.epochs_trained, whole.epochs_trained);
  // A different space is refused.
  std::string changed = kQualities;
  changed += "\n";
  tune::SearchOptions other = options(dir, changed.c_str(), 1);
  other.resume = true;
  EXPECT_THROW(tune::run_search(other, continued), InvalidArgument);
  // So is a state edited away from its space: fewer trials (the scheduler
  // then ran past them: a crash), another trial's settings, other rungs.
  const fs::path state_path = fs::path(dir) / "search.json";
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(state_path));
  const auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit,
                                  const std::string& needle) {
    nlohmann::json edited = saved;
    edit(edited);
    std::ofstream(state_path, std::ios::trunc) << edited.dump();
    FakeRunner runner;
    try {
      tune::run_search(resume, runner);
      ADD_FAILURE() << "resumed an edited state (" << needle << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused([](nlohmann::json& j) { j["trials"] = nlohmann::json::array(); },
                 "holds 0 trials where the space makes 9");
  expect_refused([](nlohmann::json& j) { j["trials"].erase(8); },
                 "holds 8 trials where the space makes 9");
  expect_refused([](nlohmann::json& j) { j["trials"][2]["settings"][0][1] = "0.45"; },
                 "gives trial 2 other settings");
  expect_refused([](nlohmann::json& j) { j["asha"]["reduction_factor"] = 2; },
                 "schedules other rungs");
  // An integer no int64 holds is named, not cast (undefined behaviour).
  expect_refused([](nlohmann::json& j) { j["trials"][1]["started_rung"] = 1e30; }, "started_rung");
  expect_refused([](nlohmann::json& j) { j["trials"][1]["seed"] = -3; }, "seed");
  // And trials run with other flags than those it started with.
  std::ofstream(state_path, std::ios::trunc) << saved.dump();
  tune::SearchOptions flagged = resume;
  flagged.trial_arguments = {"--batch-size", "64"};
  FakeRunner runner;
  try {
    tune::run_search(flagged, runner);
    ADD_FAILURE() << "resumed with other trial flags";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("this command gives --batch-size 64"), std::string::npos)
        << e.what();
  }
}

TEST(Search, ADivergedTrialIsTheWorstResultAndAFailedFirstTrialStopsTheSearch) {
  const std::string dir = (fs::path(TANDEM_TEST_TMPDIR) / "search_diverged").string();
  fs::remove_all(dir);
  const char* text = R"([search]
sampler = "grid"
min_epochs = 1
max_epochs = 3
[space]
lr = { choice = [500, 0.2, 0.1] }
)";
  FakeRunner runner;
  const tune::SearchResult r = tune::run_search(options(dir, text, 1), runner);
  EXPECT_TRUE(std::isnan(r.trials[0].results[0]));
  EXPECT_EQ(r.trials[0].error, "training diverged");
  EXPECT_EQ(r.best, 1);

  class Failing : public tune::TrialRunner {
   public:
    void start(const tune::TrialJob& job) override { jobs.push_back(job); }
    std::pair<tune::TrialJob, tune::TrialOutcome> wait() override {
      tune::TrialJob job = jobs.front();
      jobs.pop_front();
      return {job, {.status = tune::TrialOutcome::Status::failed, .error = "bad flag --x"}};
    }
    std::deque<tune::TrialJob> jobs;
  } failing;
  fs::remove_all(dir);
  try {
    tune::run_search(options(dir, text, 1), failing);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trial 0 (lr=500) failed: bad flag --x"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem
