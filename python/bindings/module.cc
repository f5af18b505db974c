// tandem._tandem: the extension module under the `tandem` package.
#include "common.h"

PYBIND11_MODULE(_tandem, m) {
  m.doc() =
      "tandem's C++ engine. Use the `tandem` package, which re-exports these "
      "names under tandem, tandem.ops, tandem.nn, tandem.data and tandem.distribute.";
  using namespace tandem::python;
  bind_errors(m);
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_data(m);
  bind_train(m);
  bind_engine(m);
}
