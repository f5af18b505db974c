// main() of the MPI test programs: Open MPI's settings as the tandem command
// applies them (the library leaves the environment alone), then the tests.
#include <gtest/gtest.h>

#include "tandem/comm/mpi.h"

int main(int argc, char** argv) {
  tandem::comm::apply_recommended_mpi_settings();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
