#include "tandem/cli/stop_signals.h"

#include <unistd.h>

#include <atomic>

namespace tandem::cli {
namespace {

// The trainer a stop signal should stop, and the signal that did; the
// handler only does atomic stores.
std::atomic<train::Trainer*> interruptible{nullptr};
std::atomic<int> stop_signal{0};

// Only async-signal-safe work: atomic stores and write(2).
extern "C" void on_stop_signal(int signal) {
  stop_signal.store(signal);
  if (train::Trainer* trainer = interruptible.load()) trainer->request_stop();
  static const char interrupted[] =
      "\ntandem: interrupted, saving a checkpoint (Ctrl-C again to abort)\n";
  static const char terminated[] =
      "\ntandem: terminated (SIGTERM), saving a checkpoint (SIGTERM again to abort)\n";
  static const char user1[] = "\ntandem: SIGUSR1, saving a checkpoint and stopping\n";
  const char* message = signal == SIGTERM ? terminated : signal == SIGUSR1 ? user1 : interrupted;
  const size_t size = signal == SIGTERM   ? sizeof(terminated) - 1
                      : signal == SIGUSR1 ? sizeof(user1) - 1
                                          : sizeof(interrupted) - 1;
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, message, size);
}

}  // namespace

StopSignals::StopSignals(train::Trainer* trainer) {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESETHAND;  // the second signal terminates
  sigemptyset(&action.sa_mask);
  interruptible.store(trainer);
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  interruptible.store(nullptr);
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignals::status() {
  const int s = stop_signal.load();
  return 128 + (s == 0 ? SIGINT : s);
}

}  // namespace tandem::cli
