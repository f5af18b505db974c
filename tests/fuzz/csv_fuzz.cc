// CSV: quoting, field counts, numbers, record and field caps; with a header
// and typed columns, and without.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/csv.h"
#include "tandem/data/dataset.h"

namespace {
void drain(const std::string& path, tandem::data::CsvOptions options) {
  try {
    tandem::data::Iterator it = tandem::data::from_csv(path, std::move(options)).iterator();
    while (it.next()) {
    }
  } catch (const tandem::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string path = fuzz::as_file(data, size, "input.csv");
  drain(path, {});
  drain(path, {.header = false,
               .columns = {{.name = "x", .dtype = DType::f32, .default_value = "0"},
                           {.name = "n", .dtype = DType::i32},
                           {.name = "text", .dtype = DType::u8}}});
  return 0;
}
