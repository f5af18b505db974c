#pragma once
// Small text files read whole (model files, data specifications, search
// spaces and states, run summaries), never past a cap: a file that is, or
// grows to be, larger than the reader expects is an error before it is
// held in memory.

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

// The text of the regular file at `path`, at most max_bytes long (checked
// before reading and while reading). `what` names the file in errors
// ("model file"). Throws IoError.
std::string read_text_file(const std::string& path, std::string_view what,
                           std::uintmax_t max_bytes);

}  // namespace tandem
