#pragma once
// What a user did wrong on the command line, said so that they can fix it:
// CLI11's message, and for an unknown option the one it most likely meant
// (--learning-rate: --lr; --batch_size: --batch-size; a typo), for an
// option given twice that it was.

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

// The message for `e`, thrown by parsing `app` (the top-level app).
std::string explain(const CLI::ParseError& e, const CLI::App& app);

// After parsing: throws CLI::ValidationError naming the flag for an integer
// value outside its type's range (CLI11 reads one as the type's limit:
// --epochs 99999999999999999999 trained 2^63 - 1 epochs) or not written as
// decimal digits.
void check_integer_values(const CLI::App& app);

}  // namespace tandem::cli
