#include "maf_sandbox/kinds/codeact.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include <algorithm>
#include <boost/asio/this_coro.hpp>
#include <set>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "output_patterns.hpp"
#include "sandboxed_call.hpp"

namespace maf_sandbox::kinds {
namespace {

constexpr std::size_t kListedNamesShown = 20;
constexpr const char* kInterpreter = "python3";

std::string listing_hint(const std::vector<std::string>& names) {
    if (names.empty()) {
        return "The file store is empty, so no input files can be used.";
    }
    std::string shown;
    for (std::size_t i = 0; i < names.size() && i < kListedNamesShown; ++i) {
        shown += shown.empty() ? "" : ", ";
        shown += detail::bounded_echo(names[i]);
    }
    if (names.size() > kListedNamesShown) {
        shown += fmt::format(" and {} more", names.size() - kListedNamesShown);
    }
    return fmt::format("Use only names the store lists: {}.", shown);
}

// A failure that arrives while the call is being cancelled belongs to the canceller, so it is
// rethrown. Any other is logged with its type: the model gets a fixed sentence, the operator the
// reason.
Task<void> log_unless_cancelled(std::exception_ptr error, spdlog::logger& log,
                                const std::string& what) {
    auto state = co_await boost::asio::this_coro::cancellation_state;
    if (state.cancelled() != boost::asio::cancellation_type::none) {
        std::rethrow_exception(error);
    }
    try {
        std::rethrow_exception(error);
    } catch (const Error& e) {
        log.error("{}: {}: {}", what, e.type_name(), e.what());
    } catch (const std::exception& e) {
        log.error("{}: {}", what, e.what());
    }
}

// A fixed sentence for an output that could not be landed; the typed reason goes to the log.
std::pair<CallFailure, std::string> landing_sentence(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const SandboxOutputMissing&) {
        return {CallFailure::refused,
                "The program ran, but did not write every declared output file; write each of "
                "them in the current working directory."};
    } catch (const SandboxOutputNotRegular&) {
        return {CallFailure::refused,
                "The program ran, but a declared output is not a regular file (a directory or a "
                "link); write it as a plain file."};
    } catch (const SandboxTransferCapExceeded&) {
        return {CallFailure::refused,
                "The program ran, but its output files went over the transfer cap and were "
                "refused, not truncated; write smaller output files."};
    } catch (const SandboxOutputNotConfined&) {
        return {CallFailure::refused,
                "The program ran, but a declared output path escapes the working directory "
                "through a link; write outputs as plain files."};
    } catch (const SandboxOutputSinkRequired&) {
        return {CallFailure::refused,
                "The program ran, but this host has nowhere to put output files; ask the operator "
                "to configure where outputs go."};
    } catch (const SandboxArtifactNameCollision&) {
        return {CallFailure::refused,
                "The program ran, but two of its output files differ only in letter case; give "
                "each output a distinct name."};
    } catch (...) {
        return {CallFailure::infrastructure,
                "The program ran, but its output files could not be landed on the host. Ask the "
                "operator (the reason is in the server's log)."};
    }
}

}  // namespace

SandboxSpec codeact_spec(const CodeActConfig& config) {
    std::set<Capability> requires_capabilities{Capability::exec, Capability::files_in};
    const bool named_later = !config.output_patterns.empty() || config.outputs_per_call;
    if (!config.outputs.empty() || named_later) {
        requires_capabilities.insert(Capability::files_out);
    }
    auto fields = kind_spec_fields(kCodeActKind, config.sandbox, std::move(requires_capabilities));
    fields.declared_outputs = config.outputs;
    fields.outputs_named_at_call_time = named_later;
    return SandboxSpec(std::move(fields));
}

struct CodeActTool::Impl {
    detail::KindBinding binding;
    CodeActConfig config;
    std::shared_ptr<const FileStore> store;
    std::optional<OutputSink> sink;

    ToolResult refused(std::string message) const {
        return detail::failed(binding, CallFailure::refused, std::move(message));
    }

    std::optional<ToolResult> refuse_outputs(const std::vector<std::string>& outputs) const {
        if (outputs.empty()) {
            return std::nullopt;
        }
        if (!config.outputs_per_call) {
            return refused(
                "This server does not take outputs per call, so nothing ran. Call execute_code "
                "without 'outputs'.");
        }
        if (outputs.size() > detail::kMaxOutputPatterns) {
            return refused(fmt::format(
                "'outputs' names {} patterns, over the limit of {} per call, so nothing ran; use "
                "globs such as '*.png' to name many files at once.",
                outputs.size(), detail::kMaxOutputPatterns));
        }
        for (const auto& pattern : outputs) {
            if (auto problem = detail::output_pattern_problem(pattern)) {
                return refused(fmt::format("Output {}, so nothing ran.", *problem));
            }
        }
        return std::nullopt;
    }

    // Checks the model's input against the host's store and caps before any sandbox is touched.
    std::optional<ToolResult> refuse_inputs(const CodeActArguments& arguments,
                                            std::vector<std::string>& names) const {
        const auto listing = store->list();
        for (const auto& name : arguments.input_files) {
            if (!std::binary_search(listing.begin(), listing.end(), name)) {
                return refused(
                    fmt::format("Input file '{}' is not in the file store, so nothing was copied "
                                "and nothing ran. {}",
                                detail::bounded_echo(name), listing_hint(listing)));
            }
            if (name == kProgramFileName) {
                return refused(fmt::format(
                    "Input file '{}' has the same name as the program file; the store file "
                    "cannot be used by execute_code.",
                    name));
            }
            if (std::find(names.begin(), names.end(), name) == names.end()) {
                names.push_back(name);
            }
        }
        if (auto refusal = refuse_outputs(arguments.outputs)) {
            return refusal;
        }
        const auto& caps = binding.spec->files_in;
        // The program is a file sent in too.
        if (names.size() + 1 > caps.max_files) {
            return refused(fmt::format(
                "Too many input files: at most {} files (the program included) may be sent to "
                "the sandbox per call.",
                caps.max_files));
        }
        std::uint64_t total = arguments.code.size();
        if (arguments.code.size() > caps.max_bytes_per_file) {
            return refused(fmt::format("The program is {} bytes, over the {}-byte per-file cap.",
                                       arguments.code.size(), caps.max_bytes_per_file));
        }
        for (const auto& name : names) {
            const auto size = store->size_of(name).value_or(0);
            if (size > caps.max_bytes_per_file) {
                return refused(fmt::format(
                    "Input file '{}' is {} bytes, over the {}-byte per-file cap; it was not "
                    "copied and nothing ran.",
                    name, size, caps.max_bytes_per_file));
            }
            total += size;
        }
        if (total > caps.max_total_bytes) {
            return refused(fmt::format(
                "The program and input files total {} bytes, over the {}-byte cap per call; "
                "send fewer or smaller files.",
                total, caps.max_total_bytes));
        }
        return std::nullopt;
    }

    Task<void> run(detail::CallSite& site, ToolResult& result, std::string code,
                   std::vector<std::string> names, std::vector<std::string> patterns,
                   std::optional<OutputSink> caller_sink, ProgressReporter progress,
                   OutputObserver output) {
        if (progress) {
            progress(1.0, 4.0, "copying the program and input files in");
        }
        for (const auto& name : names) {
            std::string content;
            try {
                content = store->read(name, binding.spec->files_in.max_bytes_per_file);
            } catch (const std::exception& e) {
                binding.log->error("{}: reading store file failed: {}", binding.tool_name,
                                   e.what());
                result.failure = CallFailure::infrastructure;
                result.message = fmt::format(
                    "Input file '{}' could not be read from the file store, so nothing ran. Ask "
                    "the operator (the reason is in the server's log).",
                    name);
                co_return;
            }
            if (!co_await write(site, name, std::move(content), result)) {
                co_return;
            }
        }
        if (!co_await write(site, kProgramFileName, std::move(code), result)) {
            co_return;
        }
        if (progress) {
            progress(2.0, 4.0, "running the program");
        }
        const auto program_path = join_guest_path(site.call_path, kProgramFileName);
        // Built outside the co_await: g++ 12 cannot carry an initializer_list across a suspension.
        Argv argv{kInterpreter, program_path};
        if (!co_await detail::run_program(binding, site, std::move(argv), result,
                                          std::move(output))) {
            co_return;
        }
        if ((config.outputs.empty() && patterns.empty()) || result.program->exit_code != 0) {
            co_return;
        }
        // Chosen before the co_await: g++ 12 destroys a conditional's temporary twice across a
        // suspension.
        auto to = sink;
        if (caller_sink) {
            to = std::move(caller_sink);
        }
        co_await land_outputs(site, result, std::move(patterns), std::move(to));
    }

    Task<bool> write(detail::CallSite& site, const std::string& name, std::string content,
                     ToolResult& result) {
        std::exception_ptr error;
        try {
            co_await site.sandbox->write_file(name, std::move(content), site.call_path);
            co_return true;
        } catch (...) {
            error = std::current_exception();
        }
        const auto what =
            fmt::format("{}: writing {} into the sandbox failed", binding.tool_name, name);
        co_await log_unless_cancelled(error, *binding.log, what);
        result.failure = CallFailure::infrastructure;
        result.message = fmt::format(
            "Could not write '{}' into the sandbox, so nothing ran. Try again; if it keeps "
            "failing, ask the operator (the reason is in the server's log).",
            name);
        co_return false;
    }

    Task<void> land_outputs(detail::CallSite& site, ToolResult& result,
                            std::vector<std::string> patterns, std::optional<OutputSink> to) {
        // Outputs are named relative to the call directory, where the program ran.
        auto fields = binding.spec.fields();
        fields.work_dir = site.call_path;
        std::exception_ptr error;
        try {
            std::vector<DeclaredOutput> named;
            if (!patterns.empty()) {
                // One more than the cap is enough for collect_outputs to refuse the count.
                auto matches = co_await detail::match_output_patterns(
                    *site.sandbox, site.call_path, std::move(patterns),
                    static_cast<std::size_t>(binding.spec->files_out.max_files));
                result.unmatched_outputs = std::move(matches.unmatched);
                for (auto& name : matches.names) {
                    // A declared output the pattern matched too is collected once, as declared.
                    const auto declared = std::find_if(
                        config.outputs.begin(), config.outputs.end(),
                        [&](const DeclaredOutput& output) { return output.path == name; });
                    if (declared != config.outputs.end()) {
                        continue;
                    }
                    DeclaredOutput output;
                    output.path = std::move(name);
                    output.required = false;
                    named.push_back(std::move(output));
                }
            }
            auto landed = co_await collect_outputs(*site.sandbox, SandboxSpec(std::move(fields)),
                                                   std::move(to), std::move(named));
            for (auto& artifact : landed) {
                result.landed.push_back(std::move(artifact.display));
            }
            co_return;
        } catch (...) {
            error = std::current_exception();
        }
        const auto what = fmt::format("{}: landing outputs failed", binding.tool_name);
        co_await log_unless_cancelled(error, *binding.log, what);
        auto [failure, message] = landing_sentence(error);
        result.failure = failure;
        result.message = std::move(message);
    }
};

CodeActTool::CodeActTool(std::shared_ptr<SandboxRouter> router, CodeActConfig config,
                         std::shared_ptr<const FileStore> store, std::optional<OutputSink> sink,
                         std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_unique<Impl>(
          Impl{detail::KindBinding{std::move(router), codeact_spec(config), config.sandbox.timeout,
                                   config.sandbox.max_output_bytes, config.sandbox.cleanup_timeout,
                                   std::move(log), kCodeActToolName},
               config, std::move(store), std::move(sink)})) {
    if (!impl_->binding.router) {
        throw InvalidArgument("execute_code needs a router; pass the host's SandboxRouter");
    }
    if (!impl_->binding.log) {
        throw InvalidArgument("execute_code needs a logger for the details it keeps from models");
    }
    if (!impl_->store) {
        impl_->store = std::make_shared<FileStore>();
    }
    if (!landing_outputs(impl_->binding.spec).empty() && !impl_->sink) {
        throw missing_sink_refusal(impl_->binding.spec, kCodeActToolName);
    }
    impl_->binding.router->ensure_can_serve(impl_->binding.spec);
}

CodeActTool::~CodeActTool() = default;

const SandboxSpec& CodeActTool::spec() const {
    return impl_->binding.spec;
}
ResultProvenance CodeActTool::provenance() const {
    return detail::provenance_of(impl_->binding);
}
const CodeActConfig& CodeActTool::config() const {
    return impl_->config;
}
const FileStore& CodeActTool::store() const {
    return *impl_->store;
}

Task<ToolResult> CodeActTool::execute_code(CallerContext caller, CodeActArguments arguments,
                                           ProgressReporter progress) {
    auto key = detail::key_for(caller);
    if (!key) {
        co_return detail::unbound_call_refusal(impl_->binding);
    }
    std::vector<std::string> names;
    if (auto refusal = impl_->refuse_inputs(arguments, names)) {
        co_return std::move(*refusal);
    }
    auto patterns = impl_->config.output_patterns;
    patterns.insert(patterns.end(), arguments.outputs.begin(), arguments.outputs.end());
    auto* impl = impl_.get();
    detail::CallBody body = [impl, code = std::move(arguments.code), names = std::move(names),
                             patterns = std::move(patterns), sink = caller.output_sink, progress,
                             output = caller.output](detail::CallSite& site, ToolResult& result) {
        return impl->run(site, result, code, names, patterns, sink, progress, output);
    };
    co_return co_await detail::run_in_call_directory(impl_->binding, std::move(*key),
                                                     std::move(body), progress, caller.allowance);
}

}  // namespace maf_sandbox::kinds
