#include "maf_sandbox/core/reclaim.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {

namespace {

std::size_t component_count(std::string_view path) {
    std::size_t count = 0;
    bool inside = false;
    for (char c : path) {
        if (c == '/') {
            inside = false;
        } else if (!inside) {
            inside = true;
            ++count;
        }
    }
    return count;
}

std::string trimmed(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) {
        return {};
    }
    const auto last = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(first, last - first + 1));
}

bool is_cancellation(const boost::system::system_error& error) {
    return error.code() == boost::asio::error::operation_aborted;
}

}  // namespace

Task<std::optional<std::string>> reclaim_guest_path(Sandbox& sandbox, std::string path,
                                                    std::string working_directory,
                                                    Seconds timeout) {
    std::string resolved;
    try {
        resolved = confine_guest_path(path, working_directory);
    } catch (const InvalidArgument& error) {
        co_return std::string(error.what());
    }
    if (resolved == normpath(working_directory)) {
        co_return fmt::format(
            "'{}' is the working directory itself; only a directory inside it is reclaimed", path);
    }
    if (component_count(resolved) < 2) {
        co_return fmt::format(
            "'{}' has fewer than two path components; a reclaim never removes a top-level "
            "directory",
            resolved);
    }
    ExecRequest request;
    request.command = "rm -rf " + shell_quote(resolved);
    request.working_directory = "/";  // the one directory that always exists
    request.timeout = timeout;
    ExecResult result;
    try {
        result = co_await sandbox.exec(std::move(request));
    } catch (const Error& error) {
        co_return fmt::format("the removal call failed: {}: {}", error.type_name(), error.what());
    } catch (const boost::system::system_error& error) {
        if (is_cancellation(error)) {
            throw;
        }
        co_return fmt::format("the removal call failed: system_error: {}", error.what());
    } catch (const std::exception& error) {
        co_return fmt::format("the removal call failed: exception: {}", error.what());
    }
    if (result.exit_code != 0) {
        co_return fmt::format("the removal of '{}' exited with code {}: {}", resolved,
                              result.exit_code, trimmed(result.stderr_text()));
    }
    co_return std::nullopt;
}

}  // namespace maf_sandbox
