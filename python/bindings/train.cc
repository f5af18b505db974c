#include "common.h"

namespace tandem::python {

void bind_train(py::module_& m) { (void)m; }

}  // namespace tandem::python
