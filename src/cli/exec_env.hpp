// `-e KEY=VALUE` and `--env-file FILE` of `run` and `exec`, as Docker spells them: the variables a
// command gets on top of the image's environment. Shared by the full CLI and the lean front end, so
// both accept and refuse the same input.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace maf_sandbox::cli {

// The environment for ExecRequest::environment: every --env-file in order (one KEY=VALUE a line;
// blank lines and lines whose first non-blank character is '#' are skipped; the value is the rest
// of the line verbatim, quotes included), then every -e in order, a later name replacing an
// earlier one. `-e KEY` without '=' takes KEY's value from this process's environment. A name must
// be [A-Za-z_][A-Za-z0-9_]*. Throws InvalidArgument naming the flag, and for a file its path and
// line number, for a malformed entry, an unset `-e KEY`, a NUL byte or a file that cannot be read.
std::map<std::string, std::string> exec_environment(const std::vector<std::string>& pairs,
                                                    const std::vector<std::string>& env_files);

}  // namespace maf_sandbox::cli
