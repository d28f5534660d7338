// The `trident` command line (devices, train, eval, predict, export-weights), callable from tests with its own streams.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace trident {

// Runs the CLI on args (without the program name); returns the exit status. Errors a user can
// act on go to err as one "trident: ..." message with status 2 (usage) or 1 (anything else).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace trident
