// Private helpers shared by the conformance suites' source files: the probe assertion, the
// "refused with" check and small exec wrappers.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "maf_sandbox/core/conformance.hpp"

namespace maf_sandbox::conformance_detail {

// A probe's check did not hold; the message is the probe's failure text.
class ProbeFailed : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

inline void expect(bool holds, const std::string& failure) {
    if (!holds) {
        throw ProbeFailed(failure);
    }
}

// The exception's type as people know it: the hierarchy's own name, else the demangled C++ name.
std::string exception_type_name(const std::exception& error);

// "<Type>: <message>" of the exception in flight (call only inside a catch).
std::string describe_current_exception();

// Passes iff awaiting `call` throws an `Expected` (subclasses included).
template <typename Expected, typename T>
Task<void> refused_with(std::string_view expected_name, std::string what, Task<T> call) {
    std::string failure;
    try {
        co_await std::move(call);
        failure = fmt::format("{} returned instead of raising {}", what, expected_name);
    } catch (const Expected&) {
        co_return;
    } catch (const std::exception& error) {
        failure = fmt::format("{} raised {} ({}), not {}", what, exception_type_name(error),
                              error.what(), expected_name);
    }
    throw ProbeFailed(failure);
}

// One exec in the probes' style: working directory explicit, the context's timeout.
Task<ExecResult> run_in_guest(ProbeContext& context, Command command,
                              std::string working_directory);

// The exit code of `test <flag> <path>` run in `working_directory`.
Task<int> guest_test(ProbeContext& context, std::string flag, std::string path,
                     std::string working_directory);

std::string strip(std::string_view text);

// An argv built outside the awaiting expression: g++ 12 cannot keep an initializer list's array
// alive across a co_await ("array used as initializer"), so coroutines build argvs with this in a
// statement of their own.
Argv make_argv(std::initializer_list<std::string> words);

}  // namespace maf_sandbox::conformance_detail
