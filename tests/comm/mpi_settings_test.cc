// Open MPI's recommended settings (comm/mpi.h): the front ends apply them
// where the environment is silent, and a user's own value stands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tandem/comm/mpi.h"

namespace {

using namespace tandem;

std::optional<std::string> read_variable(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

void restore_variable(const std::string& name, const std::optional<std::string>& value) {
  if (value) {
    setenv(name.c_str(), value->c_str(), 1);
  } else {
    unsetenv(name.c_str());
  }
}

TEST(MpiSettings, AppliedOnlyWhereTheEnvironmentIsSilent) {
  const std::vector<comm::MpiSetting> settings = comm::recommended_mpi_settings();
  ASSERT_GE(settings.size(), 2u);
  std::vector<std::optional<std::string>> saved;
  for (const comm::MpiSetting& s : settings) saved.push_back(read_variable(s.variable));
  // The user chose the first; the others are unset.
  setenv(settings[0].variable.c_str(), "user value", 1);
  for (size_t i = 1; i < settings.size(); ++i) unsetenv(settings[i].variable.c_str());

  const std::vector<std::string> set = comm::apply_recommended_mpi_settings();
  EXPECT_EQ(read_variable(settings[0].variable), "user value");
  EXPECT_EQ(std::count(set.begin(), set.end(), settings[0].variable), 0);
  for (size_t i = 1; i < settings.size(); ++i) {
    EXPECT_EQ(read_variable(settings[i].variable), settings[i].value) << settings[i].variable;
    EXPECT_EQ(std::count(set.begin(), set.end(), settings[i].variable), 1);
  }
  EXPECT_EQ(set.size(), settings.size() - 1);
  // Applied again, nothing is left to set.
  EXPECT_TRUE(comm::apply_recommended_mpi_settings().empty());

  for (size_t i = 0; i < settings.size(); ++i) restore_variable(settings[i].variable, saved[i]);
}

}  // namespace
