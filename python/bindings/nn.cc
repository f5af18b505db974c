#include "common.h"

namespace tandem::python {

void bind_nn(py::module_& m) { (void)m; }

}  // namespace tandem::python
