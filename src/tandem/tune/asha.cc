#include "tandem/tune/asha.h"

#include <algorithm>
#include <cmath>

#include "tandem/base/error.h"

namespace tandem::tune {

std::vector<int64_t> rung_epochs(const AshaOptions& o) {
  if (o.min_epochs < 1 || o.max_epochs < o.min_epochs || o.reduction_factor < 2) {
    TANDEM_THROW(InvalidArgument, "ASHA needs 1 <= min_epochs <= max_epochs and eta >= 2, got ",
                 o.min_epochs, ", ", o.max_epochs, ", ", o.reduction_factor);
  }
  if (!o.successive_halving) return {o.max_epochs};
  std::vector<int64_t> rungs;
  for (int64_t r = o.min_epochs; r < o.max_epochs; r *= o.reduction_factor) rungs.push_back(r);
  rungs.push_back(o.max_epochs);
  return rungs;
}

AshaScheduler::AshaScheduler(const AshaOptions& options)
    : options_(options), rungs_(rung_epochs(options)) {
  if (options.trials < 1) TANDEM_THROW(InvalidArgument, "a search needs at least one trial");
  trials_.resize(static_cast<size_t>(options.trials));
  running_.assign(trials_.size(), false);
}

bool AshaScheduler::better(double a, double b) const {
  if (std::isnan(b)) return !std::isnan(a);
  if (std::isnan(a)) return false;
  return options_.maximize ? a > b : a < b;
}

std::optional<AshaScheduler::Job> AshaScheduler::peek() const {
  const auto n = static_cast<int64_t>(trials_.size());
  auto job = [&](int64_t t, int64_t rung) {
    return Job{.trial = t, .rung = rung, .epochs = rungs_[static_cast<size_t>(rung)]};
  };
  // A job started before an interruption and never reported.
  for (int64_t t = 0; t < n; ++t) {
    const TrialState& s = trials_[static_cast<size_t>(t)];
    if (!running_[static_cast<size_t>(t)] && !s.failed && s.started_rung >= 0 &&
        s.started_rung == static_cast<int64_t>(s.results.size()))
      return job(t, s.started_rung);
  }
  // A promotion, from the highest rung down.
  for (auto k = static_cast<int64_t>(rungs_.size()) - 2; k >= 0; --k) {
    std::vector<int64_t> at_rung;
    for (int64_t t = 0; t < n; ++t) {
      const TrialState& s = trials_[static_cast<size_t>(t)];
      if (!s.failed && static_cast<int64_t>(s.results.size()) > k) at_rung.push_back(t);
    }
    const auto top = static_cast<int64_t>(at_rung.size()) / options_.reduction_factor;
    if (top == 0) continue;
    // Stable, so that ties go to the earlier trial.
    std::stable_sort(at_rung.begin(), at_rung.end(), [&](int64_t a, int64_t b) {
      return better(trials_[static_cast<size_t>(a)].results[static_cast<size_t>(k)],
                    trials_[static_cast<size_t>(b)].results[static_cast<size_t>(k)]);
    });
    for (int64_t i = 0; i < top; ++i) {
      const int64_t t = at_rung[static_cast<size_t>(i)];
      const TrialState& s = trials_[static_cast<size_t>(t)];
      if (s.started_rung == k && !std::isnan(s.results[static_cast<size_t>(k)]))
        return job(t, k + 1);
    }
  }
  for (int64_t t = 0; t < n; ++t)
    if (trials_[static_cast<size_t>(t)].started_rung < 0) return job(t, 0);
  return std::nullopt;
}

std::optional<AshaScheduler::Job> AshaScheduler::next() {
  std::optional<Job> j = peek();
  if (j) {
    trials_[static_cast<size_t>(j->trial)].started_rung = j->rung;
    running_[static_cast<size_t>(j->trial)] = true;
  }
  return j;
}

void AshaScheduler::report(const Job& job, double metric) {
  TrialState& s = trials_.at(static_cast<size_t>(job.trial));
  if (!running_[static_cast<size_t>(job.trial)] ||
      static_cast<int64_t>(s.results.size()) != job.rung) {
    TANDEM_THROW(InvalidArgument, "ASHA: trial ", job.trial, " reported rung ", job.rung,
                 " that it was not running");
  }
  s.results.push_back(metric);
  running_[static_cast<size_t>(job.trial)] = false;
}

void AshaScheduler::report_failure(const Job& job) {
  trials_.at(static_cast<size_t>(job.trial)).failed = true;
  running_[static_cast<size_t>(job.trial)] = false;
}

bool AshaScheduler::done() const {
  return std::none_of(running_.begin(), running_.end(), [](bool r) { return r; }) &&
         !peek().has_value();
}

void AshaScheduler::restore(int64_t trial, TrialState state) {
  if (trial < 0 || trial >= static_cast<int64_t>(trials_.size()) ||
      static_cast<int64_t>(state.results.size()) > static_cast<int64_t>(rungs_.size()) ||
      state.started_rung >= static_cast<int64_t>(rungs_.size()) ||
      state.started_rung > static_cast<int64_t>(state.results.size()) ||
      state.started_rung < static_cast<int64_t>(state.results.size()) - 1) {
    TANDEM_THROW(InvalidArgument, "ASHA: trial ", trial, "'s saved state does not fit the ",
                 rungs_.size(), " rungs of this search");
  }
  trials_[static_cast<size_t>(trial)] = std::move(state);
}

AshaScheduler::Best AshaScheduler::best() const {
  for (auto k = static_cast<int64_t>(rungs_.size()) - 1; k >= 0; --k) {
    int64_t best = -1;
    for (int64_t t = 0; t < static_cast<int64_t>(trials_.size()); ++t) {
      const TrialState& s = trials_[static_cast<size_t>(t)];
      if (static_cast<int64_t>(s.results.size()) <= k ||
          std::isnan(s.results[static_cast<size_t>(k)]))
        continue;
      if (best < 0 || better(s.results[static_cast<size_t>(k)],
                             trials_[static_cast<size_t>(best)].results[static_cast<size_t>(k)]))
        best = t;
    }
    if (best >= 0) return {best, k};
  }
  return {};
}

}  // namespace tandem::tune
