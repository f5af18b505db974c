#include "tandem/base/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <mutex>

#include "tandem/base/error.h"

namespace tandem {

int num_threads() {
  return omp_get_max_threads();
}

void set_num_threads(int n) {
  if (n < 1) TANDEM_THROW(InvalidArgument, "thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int parallel_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  const int64_t by_grain = (n + grain - 1) / grain;
  return static_cast<int>(std::min<int64_t>(by_grain, num_threads()));
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  const int chunks = parallel_chunks(n, grain);
  if (chunks <= 0) return;
#if defined(TANDEM_SERIAL_PARALLEL_FOR)
  body(0, n);
  return;
#endif
  if (chunks == 1 || omp_in_parallel()) {
    body(0, n);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(chunks)
  {
    const int64_t id = omp_get_thread_num();
    const int64_t team = omp_get_num_threads();
    const int64_t begin = n * id / team;
    const int64_t end = n * (id + 1) / team;
    try {
      if (begin < end) body(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tandem
