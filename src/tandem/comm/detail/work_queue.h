#pragma once
// Private: a thread that runs tasks one at a time in submission order (a
// communicator's progress thread for asynchronous collectives).

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::comm {

class WorkQueue {
 public:
  // name: the thread's trace track.
  explicit WorkQueue(std::string name);
  ~WorkQueue();  // finishes the queued tasks, then joins
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Tasks must not throw (they report through their Work).
  void push(std::function<void()> task);
  // Blocks until every task pushed so far has run.
  void drain();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool running_task_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::comm
