// Errors that gain context on their way up (crun's wrap idiom): each layer says what it was doing
// and the innermost error keeps its type, its fields and its own message (Error::cause()). A
// message then reads "acquire sandbox for key s/t kind shell: create sandbox: PUT /sandboxes:
// the ACAS service kept failing (HTTP 503) after 3 attempts; retry later".
#pragma once

#include <string>
#include <utility>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox {

// Awaits `task`; an Error escaping it gains `doing` and continues up as itself. Anything else
// (cancellation, std::bad_alloc) passes untouched.
template <typename T>
Task<T> with_context(std::string doing, Task<T> task) {
    try {
        co_return co_await std::move(task);
    } catch (Error& error) {
        error.add_context(doing);
        throw;
    }
}

// The same for synchronous work: returns what `body` returns.
template <typename Body>
decltype(auto) with_context_now(std::string_view doing, Body&& body) {
    try {
        return std::forward<Body>(body)();
    } catch (Error& error) {
        error.add_context(doing);
        throw;
    }
}

}  // namespace maf_sandbox
