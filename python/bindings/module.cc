// tandem._tandem: the extension module under the `tandem` package.
#include "common.h"
#include "tandem/comm/mpi.h"

PYBIND11_MODULE(_tandem, m) {
  m.doc() =
      "tandem's C++ engine. Use the `tandem` package, which re-exports these "
      "names under tandem, tandem.ops, tandem.nn, tandem.data and tandem.distribute.";
  using namespace tandem::python;
  // At import, before the program can start MPI (mpi.h): as the tandem
  // command does, the front end, not the library, sets Open MPI's settings.
  tandem::comm::apply_recommended_mpi_settings();
  bind_errors(m);
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_data(m);
  bind_train(m);
  bind_engine(m);
}
