// The conformance harness: subjects, the shared layout, the runner and the verdict.
#include "maf_sandbox/core/conformance.hpp"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <cctype>
#include <cstdlib>
#include <typeinfo>

#include "conformance_support.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox {

namespace conformance_detail {

std::string exception_type_name(const std::exception& error) {
    if (const auto* ours = dynamic_cast<const Error*>(&error)) {
        return std::string(ours->type_name());
    }
    int status = 0;
    char* demangled = abi::__cxa_demangle(typeid(error).name(), nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : typeid(error).name();
    std::free(demangled);
    return name;
}

std::string describe_current_exception() {
    try {
        throw;
    } catch (const std::exception& error) {
        return fmt::format("{}: {}", exception_type_name(error), error.what());
    } catch (...) {
        return "an exception of unknown type";
    }
}

Task<ExecResult> run_in_guest(ProbeContext& context, Command command,
                              std::string working_directory) {
    ExecRequest request;
    request.command = std::move(command);
    request.working_directory = std::move(working_directory);
    request.timeout = context.exec_timeout;
    co_return co_await context.subject.sandbox().exec(std::move(request));
}

Task<int> guest_test(ProbeContext& context, std::string flag, std::string path,
                     std::string working_directory) {
    auto argv = make_argv({"test", std::move(flag), std::move(path)});
    const auto result =
        co_await run_in_guest(context, std::move(argv), std::move(working_directory));
    co_return result.exit_code;
}

Argv make_argv(std::initializer_list<std::string> words) {
    return Argv(words);
}

std::string strip(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r\n\v\f");
    if (first == std::string_view::npos) {
        return "";
    }
    const auto last = text.find_last_not_of(" \t\r\n\v\f");
    return std::string(text.substr(first, last - first + 1));
}

}  // namespace conformance_detail

namespace {

using conformance_detail::describe_current_exception;
using conformance_detail::ProbeFailed;

std::string gate_name(Capability gate) {
    std::string name(to_string(gate));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return name;
}

std::string joined_names(const std::set<Capability>& capabilities) {
    std::string names;
    for (const auto capability : capabilities) {
        names += names.empty() ? "" : ", ";
        names += to_string(capability);
    }
    return names;
}

bool is_cancellation() {
    try {
        throw;
    } catch (const boost::system::system_error& error) {
        return error.code() == boost::asio::error::operation_aborted;
    } catch (...) {
        return false;
    }
}

using PlantStep = Task<void> (*)(ProbeContext& context);

struct SuiteRun {
    std::string_view suite;
    std::optional<Capability> gate;  // unset: measured, no gate and no skips
    PlantStep plant = nullptr;
    const std::vector<ConformanceProbe>* probes = nullptr;
    Seconds exec_timeout{60.0};
    std::optional<EgressUrls> egress;
};

SuiteRun suite_run(std::string_view suite, std::optional<Capability> gate, PlantStep plant,
                   const std::vector<ConformanceProbe>& probes) {
    SuiteRun run;
    run.suite = suite;
    run.gate = gate;
    run.plant = plant;
    run.probes = &probes;
    return run;
}

Task<std::vector<ProbeResult>> run_suite(ConformanceSubject& subject, SuiteRun run) {
    const auto capabilities = subject.capabilities();
    if (run.gate && capabilities.count(*run.gate) == 0) {
        throw InvalidArgument(fmt::format(
            "this subject declares no {}, so every {} probe would be skipped into a meaningless "
            "success; run the suite only against a subject whose backend declares {}",
            gate_name(*run.gate), run.suite, to_string(*run.gate)));
    }
    ProbeContext context{subject, ConformancePaths::under(subject.working_directory()),
                         run.exec_timeout, run.egress};
    std::optional<std::string> plant_failure;
    if (run.plant) {
        try {
            co_await run.plant(context);
        } catch (...) {
            if (is_cancellation()) {
                throw;
            }
            plant_failure = "planting the suite's fixtures raised " + describe_current_exception();
        }
    }
    std::vector<ProbeResult> results;
    for (const auto& probe : *run.probes) {
        ProbeResult result{std::string(run.suite), probe.name, ProbeStatus::passed, "", probe.why};
        std::set<Capability> missing;
        if (run.gate) {
            std::set_difference(probe.requires_capabilities.begin(),
                                probe.requires_capabilities.end(), capabilities.begin(),
                                capabilities.end(), std::inserter(missing, missing.end()));
        }
        if (!missing.empty()) {
            result.status = ProbeStatus::skipped;
            result.detail = "backend does not declare " + joined_names(missing);
        } else if (plant_failure) {
            result.status = ProbeStatus::failed;
            result.detail = *plant_failure;
        } else {
            try {
                co_await probe.body(context);
            } catch (const ProbeFailed& failure) {
                result.status = ProbeStatus::failed;
                result.detail = failure.what();
            } catch (...) {
                if (is_cancellation()) {
                    throw;
                }
                result.status = ProbeStatus::failed;
                result.detail = "raised " + describe_current_exception();
            }
        }
        results.push_back(std::move(result));
    }
    co_return results;
}

// Every fixture-planting step the suites use.
Task<void> plant_files_out(ProbeContext& context) {
    co_await plant_layout(context.subject);
}

Task<void> plant_probe_cwd(ProbeContext& context) {
    co_await context.subject.plant_file(context.paths.work + "/.probe-cwd", "");
}

std::vector<ProbeResult> skipped_suite(std::string_view suite,
                                       const std::vector<ConformanceProbe>& probes,
                                       const std::string& reason) {
    std::vector<ProbeResult> results;
    for (const auto& probe : probes) {
        results.push_back(
            {std::string(suite), probe.name, ProbeStatus::skipped, reason, probe.why});
    }
    return results;
}

}  // namespace

// --- Subjects ------------------------------------------------------------------------------------

PosixGuestSubject::PosixGuestSubject(std::shared_ptr<Sandbox> sandbox,
                                     std::string working_directory,
                                     std::set<Capability> capabilities, Seconds exec_timeout)
    : sandbox_(std::move(sandbox)),
      working_directory_(normpath(working_directory)),
      capabilities_(std::move(capabilities)),
      exec_timeout_(exec_timeout) {}

Task<void> PosixGuestSubject::plant_file(std::string absolute_path, std::string bytes) {
    auto parent = guest_dirname(absolute_path);
    if (parent.empty()) {
        parent = "/";
    }
    co_await sandbox_->write_file(absolute_path, std::move(bytes), std::move(parent));
}

Task<void> PosixGuestSubject::plant_symlink(std::string absolute_path, std::string target) {
    ExecRequest request;
    request.command = conformance_detail::make_argv({"ln", "-sfn", target, absolute_path});
    request.working_directory = working_directory_;
    request.timeout = exec_timeout_;
    const auto result = co_await sandbox_->exec(std::move(request));
    if (result.exit_code != 0) {
        throw Error(
            fmt::format("planting the link {} -> {} with `ln -sfn` exited {}: {}; the "
                        "guest needs a working `ln`",
                        absolute_path, target, result.exit_code, result.stderr_text()));
    }
}

InProcessSubject::InProcessSubject(std::shared_ptr<InProcessSandbox> sandbox,
                                   std::string working_directory, std::set<Capability> capabilities)
    : sandbox_(std::move(sandbox)),
      working_directory_(normpath(working_directory)),
      capabilities_(std::move(capabilities)) {}

Task<void> InProcessSubject::plant_file(std::string absolute_path, std::string bytes) {
    const auto path = normpath(absolute_path);
    sandbox_->symlinks().erase(path);
    sandbox_->contents()[path] = std::move(bytes);
    co_return;
}

Task<void> InProcessSubject::plant_symlink(std::string absolute_path, std::string) {
    const auto path = normpath(absolute_path);
    sandbox_->contents().erase(path);
    sandbox_->symlinks().insert(path);
    co_return;
}

// --- Layout --------------------------------------------------------------------------------------

ConformancePaths ConformancePaths::under(std::string_view working_directory) {
    ConformancePaths paths;
    paths.work = normpath(working_directory);
    paths.outside = paths.work + "-outside";
    paths.secret = paths.outside + "/secret.txt";
    paths.nested_secret = paths.outside + "/sub/leaf.txt";
    paths.inside = join_guest_path(paths.work, "real/inside.txt");
    paths.plain = join_guest_path(paths.work, "plain.txt");
    paths.linked_directory = join_guest_path(paths.work, "link-dir");
    paths.under_linked_directory = join_guest_path(paths.work, "link-dir/sub");
    paths.linked_file = join_guest_path(paths.work, "link-file");
    return paths;
}

std::string ConformancePaths::beyond(std::string_view name) const {
    const auto slash = outside.rfind('/');
    return fmt::format("../{}/{}", outside.substr(slash + 1), name);
}

std::string binary_payload() {
    std::string payload =
        "\xc3\xbc"
        "n\xc3\xaf"
        "c\xc3\xb6"
        "d\xc3\xa9\xe2\x86\x92payload";
    for (int byte = 0x01; byte <= 0x7f; ++byte) {
        payload.push_back(static_cast<char>(byte));
    }
    return payload;
}

Task<void> plant_layout(ConformanceSubject& subject) {
    const auto paths = ConformancePaths::under(subject.working_directory());
    co_await subject.plant_file(paths.inside, std::string(kInsidePayload));
    co_await subject.plant_file(paths.plain, std::string(kPlainPayload));
    co_await subject.plant_file(paths.secret, std::string(kSecretPayload));
    co_await subject.plant_file(paths.nested_secret, std::string(kSecretPayload));
    co_await subject.plant_symlink(paths.linked_directory, paths.outside);
    co_await subject.plant_symlink(paths.linked_file, paths.secret);
}

// --- Results -------------------------------------------------------------------------------------

std::string_view to_string(ProbeStatus status) {
    switch (status) {
        case ProbeStatus::passed:
            return "passed";
        case ProbeStatus::failed:
            return "failed";
        case ProbeStatus::skipped:
            return "skipped";
    }
    return "unknown";
}

std::vector<ProbeResult> require_no_failures(std::string_view suite,
                                             std::vector<ProbeResult> results) {
    const auto failures = std::count_if(results.begin(), results.end(), [](const auto& result) {
        return result.status == ProbeStatus::failed;
    });
    if (failures == 0) {
        return results;
    }
    auto message =
        fmt::format("{} of {} {} conformance probes failed:", failures, results.size(), suite);
    for (const auto& result : results) {
        if (result.status == ProbeStatus::failed) {
            message += fmt::format("\n  {}: {}\n    why it is in the suite: {}", result.name,
                                   result.detail, result.why);
        }
    }
    throw ConformanceFailure(message, std::string(suite),
                             std::make_shared<const std::vector<ProbeResult>>(std::move(results)));
}

// --- Suites --------------------------------------------------------------------------------------

Task<std::vector<ProbeResult>> run_files_out_conformance(ConformanceSubject& subject) {
    co_return co_await run_suite(subject, suite_run(kFilesOutSuite, Capability::files_out,
                                                    plant_files_out, files_out_probes()));
}

Task<std::vector<ProbeResult>> run_files_in_conformance(ConformanceSubject& subject) {
    co_return co_await run_suite(
        subject, suite_run(kFilesInSuite, Capability::files_in, nullptr, files_in_probes()));
}

Task<std::vector<ProbeResult>> run_exec_conformance(ConformanceSubject& subject) {
    co_return co_await run_suite(
        subject, suite_run(kExecSuite, Capability::exec, plant_probe_cwd, exec_probes()));
}

Task<std::vector<ProbeResult>> run_files_delete_conformance(ConformanceSubject& subject) {
    co_return co_await run_suite(subject, suite_run(kFilesDeleteSuite, Capability::files_delete,
                                                    nullptr, files_delete_probes()));
}

Task<std::vector<ProbeResult>> run_egress_conformance(ConformanceSubject& subject, EgressUrls urls,
                                                      Seconds exec_timeout) {
    auto run = suite_run(kEgressSuite, Capability::exec, plant_probe_cwd, egress_probes());
    run.exec_timeout = exec_timeout;
    run.egress = std::move(urls);
    co_return co_await run_suite(subject, std::move(run));
}

Task<std::vector<ProbeResult>> measure_files_delete_probes(ConformanceSubject& subject) {
    co_return co_await run_suite(
        subject, suite_run(kFilesDeleteSuite, std::nullopt, nullptr, files_delete_probes()));
}

Task<std::vector<ProbeResult>> assert_files_out_conformance(ConformanceSubject& subject) {
    co_return require_no_failures(kFilesOutSuite, co_await run_files_out_conformance(subject));
}

Task<std::vector<ProbeResult>> assert_files_in_conformance(ConformanceSubject& subject) {
    co_return require_no_failures(kFilesInSuite, co_await run_files_in_conformance(subject));
}

Task<std::vector<ProbeResult>> assert_exec_conformance(ConformanceSubject& subject) {
    co_return require_no_failures(kExecSuite, co_await run_exec_conformance(subject));
}

Task<std::vector<ProbeResult>> assert_files_delete_conformance(ConformanceSubject& subject) {
    co_return require_no_failures(kFilesDeleteSuite,
                                  co_await run_files_delete_conformance(subject));
}

Task<std::vector<ProbeResult>> assert_egress_conformance(ConformanceSubject& subject,
                                                         EgressUrls urls, Seconds exec_timeout) {
    co_return require_no_failures(
        kEgressSuite, co_await run_egress_conformance(subject, std::move(urls), exec_timeout));
}

Task<std::vector<ProbeResult>> run_declared_suites(ConformanceSubject& subject,
                                                   const BackendDeclarations& declarations,
                                                   std::optional<EgressUrls> egress_urls) {
    std::vector<ProbeResult> all;
    auto append = [&all](std::vector<ProbeResult> results) {
        std::move(results.begin(), results.end(), std::back_inserter(all));
    };
    auto undeclared = [](Capability gate, std::string_view suite) {
        return fmt::format("backend does not declare {}, the gate of the {} suite", to_string(gate),
                           suite);
    };

    if (declarations.declares(Capability::files_out)) {
        append(co_await run_files_out_conformance(subject));
    } else {
        append(skipped_suite(kFilesOutSuite, files_out_probes(),
                             undeclared(Capability::files_out, kFilesOutSuite)));
    }
    if (declarations.declares(Capability::files_in)) {
        append(co_await run_files_in_conformance(subject));
    } else {
        append(skipped_suite(kFilesInSuite, files_in_probes(),
                             undeclared(Capability::files_in, kFilesInSuite)));
    }
    if (declarations.declares(Capability::files_delete)) {
        append(co_await run_files_delete_conformance(subject));
    } else {
        append(skipped_suite(kFilesDeleteSuite, files_delete_probes(),
                             undeclared(Capability::files_delete, kFilesDeleteSuite)));
    }
    if (!declarations.declares(Capability::exec)) {
        append(skipped_suite(kEgressSuite, egress_probes(),
                             undeclared(Capability::exec, kEgressSuite)));
    } else if (declarations.egress_modes.count(Egress::allowlist) == 0) {
        append(skipped_suite(kEgressSuite, egress_probes(),
                             "backend does not enforce allowlist egress, which the suite needs"));
    } else if (!egress_urls) {
        append(skipped_suite(kEgressSuite, egress_probes(),
                             "no allowed and denied URLs were given to probe egress with"));
    } else {
        append(co_await run_egress_conformance(subject, std::move(*egress_urls)));
    }
    // Last: its final probe times out, and a backend may discard the sandbox on a timeout.
    if (declarations.declares(Capability::exec)) {
        append(co_await run_exec_conformance(subject));
    } else {
        append(skipped_suite(kExecSuite, exec_probes(), undeclared(Capability::exec, kExecSuite)));
    }
    co_return all;
}

}  // namespace maf_sandbox
