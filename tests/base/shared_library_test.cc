// Libraries loaded on first use: a missing file and a missing function are
// errors that name them, every time they are asked for; a present one binds.
#include <gtest/gtest.h>

#include <string>

#include "tandem/base/error.h"
#include "tandem/base/shared_library.h"

namespace tandem {
namespace {

struct MathTable {
  double (*cosine)(double) = nullptr;
};

std::string error_of(LazyLibrary<MathTable>& library) {
  try {
    library.get();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SharedLibrary, AMissingFileIsAnErrorNamingItEveryTime) {
  LazyLibrary<MathTable> library("NoSuchLib", {"libtandem-no-such-library.so.1"},
                                 [](void* handle, const char* file, MathTable& t) {
                                   bind_symbol(handle, file, "cos", t.cosine);
                                 });
  const std::string first = error_of(library);
  EXPECT_NE(first.find("cannot load NoSuchLib (libtandem-no-such-library.so.1)"), std::string::npos)
      << first;
  EXPECT_NE(first.find("LD_LIBRARY_PATH"), std::string::npos) << first;
  EXPECT_EQ(error_of(library), first);
}

TEST(SharedLibrary, BindsFromTheFirstFileThatLoadsAndNamesAMissingFunction) {
  LazyLibrary<MathTable> math("libm", {"libtandem-no-such-library.so.1", "libm.so.6"},
                              [](void* handle, const char* file, MathTable& t) {
                                bind_symbol(handle, file, "cos", t.cosine);
                              });
  EXPECT_DOUBLE_EQ(math.get().cosine(0.0), 1.0);
  LazyLibrary<MathTable> missing("libm", {"libtandem-no-such-library.so.1", "libm.so.6"},
                                 [](void* handle, const char* file, MathTable& t) {
                                   bind_symbol(handle, file, "tandem_no_such_function", t.cosine);
                                 });
  const std::string message = error_of(missing);
  EXPECT_NE(message.find("libm.so.6 has no tandem_no_such_function"), std::string::npos) << message;
  EXPECT_EQ(dotted_version(91903), "9.19.3");
}

}  // namespace
}  // namespace tandem
