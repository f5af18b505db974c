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

}  // namespace tandem::cli
