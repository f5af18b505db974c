#pragma once
// This host's name, for messages and for telling processes on this host
// from those on others.

#include <string>

namespace tandem {

// gethostname(); "unknown" when it fails.
std::string host_name();

}  // namespace tandem
