#include "exec_report.hpp"

#include <cstdio>
#include <string_view>

#include <fmt/format.h>

#include "exit_status.hpp"

namespace maf_sandbox::cli {

namespace {

void write_all(std::FILE* stream, std::string_view bytes) {
    std::fwrite(bytes.data(), 1, bytes.size(), stream);
    std::fflush(stream);
}

}  // namespace

int report_exec(const ExecResult& result) {
    write_all(stdout, result.stdout_bytes);
    write_all(stderr, result.stderr_bytes);
    return result.exit_code;
}

void report_replacement(const Sandbox& sandbox) {
    if (const auto& replaced = sandbox.replaced()) {
        write_all(stderr, fmt::format("[maf-sandbox: sandbox replaced, state lost: {}]\n",
                                      replaced->reason));
    }
}

int report_output_limit(const ExecOutputLimitExceeded& error, std::uint64_t cap) {
    write_all(stdout, error.stdout_head());
    write_all(stderr, error.stderr_head());
    const auto dropped =
        error.total_bytes() - error.stdout_head().size() - error.stderr_head().size();
    write_all(stderr,
              fmt::format("\n[maf-sandbox: output over the {}-byte cap; {} bytes dropped]\n", cap,
                          dropped));
    return error.exit_code() >= 0 ? error.exit_code() : kExitRefused;
}

}  // namespace maf_sandbox::cli
