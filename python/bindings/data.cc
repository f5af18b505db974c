#include "common.h"

namespace tandem::python {

void bind_data(py::module_& m) { (void)m; }

}  // namespace tandem::python
