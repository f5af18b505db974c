#include "tandem/distribute/agreement.h"

#include <bit>
#include <cstring>

#include "tandem/base/error.h"

namespace tandem::distribute {
namespace {

// Every rank's n words in rank order, through an all-gather of i32 pairs so
// that they arrive bit for bit.
std::vector<uint64_t> all_gather_words(comm::Communicator& comm, std::span<const uint64_t> words) {
  const auto count = static_cast<int64_t>(2 * words.size());
  // Host buffers whatever the replicas' devices: the words are read here.
  Tensor input = Tensor::empty(Shape{count}, DType::i32, cpu_device());
  if (!words.empty()) std::memcpy(input.raw_data(), words.data(), words.size() * sizeof(uint64_t));
  Tensor output = Tensor::empty(Shape{count * comm.size()}, DType::i32, cpu_device());
  comm.all_gather(input, output);
  std::vector<uint64_t> out(words.size() * static_cast<size_t>(comm.size()));
  if (!out.empty()) std::memcpy(out.data(), output.raw_data(), out.size() * sizeof(uint64_t));
  return out;
}

// Every global replica's 64-bit words in global replica order; local replica
// i contributes words[i]. The words travel as pairs of i32 through an
// all-gather, so they arrive bit for bit.
std::vector<uint64_t> gather_words(Strategy& strategy,
                                   const std::vector<std::vector<uint64_t>>& words) {
  const int local = strategy.local_replicas();
  if (static_cast<int>(words.size()) != local) {
    TANDEM_THROW(InvalidArgument, "agreement: need one vector per local replica (", local,
                 "), got ", words.size());
  }
  const size_t n = words.front().size();
  for (const auto& w : words) {
    if (w.size() != n) {
      TANDEM_THROW(InvalidArgument, "agreement: every local replica must pass ", n,
                   " values, one passed ", w.size());
    }
  }
  if (strategy.global_replicas() == local) {
    std::vector<uint64_t> out;
    out.reserve(n * words.size());
    for (const auto& w : words) out.insert(out.end(), w.begin(), w.end());
    return out;
  }
  std::vector<std::vector<uint64_t>> outputs(static_cast<size_t>(local));
  strategy.run([&](int r) { outputs[r] = all_gather_words(*strategy.communicator(r), words[r]); });
  return outputs.front();
}

// One block of n words per process: the block of each process's local replica 0.
std::vector<uint64_t> gather_process_words(Strategy& strategy, const std::vector<uint64_t>& mine) {
  const int local = strategy.local_replicas();
  const std::vector<uint64_t> all =
      gather_words(strategy, std::vector<std::vector<uint64_t>>(static_cast<size_t>(local), mine));
  const size_t n = mine.size();
  std::vector<uint64_t> out;
  for (size_t g = 0; g * n < all.size(); g += static_cast<size_t>(local))
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(g * n),
               all.begin() + static_cast<std::ptrdiff_t>((g + 1) * n));
  return out;
}

std::vector<uint64_t> to_words(std::span<const double> values) {
  std::vector<uint64_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = std::bit_cast<uint64_t>(values[i]);
  return out;
}

}  // namespace

std::vector<double> gather_over_replicas(Strategy& strategy,
                                         const std::vector<std::vector<double>>& per_local) {
  std::vector<std::vector<uint64_t>> words;
  words.reserve(per_local.size());
  for (const auto& v : per_local) words.push_back(to_words(v));
  const std::vector<uint64_t> all = gather_words(strategy, words);
  std::vector<double> out(all.size());
  for (size_t i = 0; i < all.size(); ++i) out[i] = std::bit_cast<double>(all[i]);
  return out;
}

std::vector<double> sum_over_replicas(Strategy& strategy,
                                      const std::vector<std::vector<double>>& per_local) {
  const size_t n = per_local.empty() ? 0 : per_local.front().size();
  const std::vector<double> all = gather_over_replicas(strategy, per_local);
  std::vector<double> total(n, 0.0);
  if (n > 0) {
    for (size_t i = 0; i < all.size(); ++i) total[i % n] += all[i];
  }
  return total;
}

std::vector<int64_t> gather_over_processes(Strategy& strategy, std::span<const int64_t> values) {
  std::vector<uint64_t> mine(values.size());
  for (size_t i = 0; i < values.size(); ++i) mine[i] = static_cast<uint64_t>(values[i]);
  const std::vector<uint64_t> all = gather_process_words(strategy, mine);
  return {all.begin(), all.end()};
}

std::vector<int64_t> sum_over_processes(Strategy& strategy, std::span<const int64_t> values) {
  const std::vector<int64_t> all = gather_over_processes(strategy, values);
  std::vector<int64_t> total(values.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) total[i % values.size()] += all[i];
  return total;
}

bool any_process(Strategy& strategy, bool flag) {
  const int64_t mine = flag ? 1 : 0;
  return sum_over_processes(strategy, std::span<const int64_t>(&mine, 1))[0] > 0;
}

std::vector<double> gather_in_group(comm::Communicator& comm, std::span<const double> values) {
  const std::vector<uint64_t> all = all_gather_words(comm, to_words(values));
  std::vector<double> out(all.size());
  for (size_t i = 0; i < all.size(); ++i) out[i] = std::bit_cast<double>(all[i]);
  return out;
}

double sum_in_group(comm::Communicator& comm, double value) {
  double total = 0.0;
  for (double v : gather_in_group(comm, std::span<const double>(&value, 1))) total += v;
  return total;
}

std::vector<double> broadcast_from_chief(Strategy& strategy, std::span<const double> values) {
  const std::vector<uint64_t> all = gather_process_words(strategy, to_words(values));
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = std::bit_cast<double>(all[i]);
  return out;
}

}  // namespace tandem::distribute
