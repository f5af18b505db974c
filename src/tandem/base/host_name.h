#pragma once
// This host's name, for messages and for telling processes on this host
// from those on others.

#include <string>
#include <string_view>

namespace tandem {

// gethostname(); `fallback` when it fails.
std::string host_name(std::string_view fallback = "unknown");

}  // namespace tandem
