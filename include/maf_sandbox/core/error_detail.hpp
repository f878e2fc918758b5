// One line describing an exception for the host's log: "<TypeName>: <message>". Provider detail
// may appear here, so it goes to logs only and never to a model.
#pragma once

#include <exception>
#include <string>

namespace maf_sandbox {

std::string error_detail(const std::exception_ptr& error);

}  // namespace maf_sandbox
