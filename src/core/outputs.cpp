#include "maf_sandbox/core/outputs.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {

namespace {

[[noreturn]] void invalid_name(std::string_view name, std::string_view why) {
    throw SandboxArtifactNameInvalid(fmt::format(
        "artifact name '{}' is refused: {}; declare a relative name such as 'out/report.txt'",
        replace_invalid_utf8(name), why));
}

std::vector<std::string_view> segments(std::string_view name) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    for (;;) {
        const auto slash = name.find('/', start);
        parts.push_back(
            name.substr(start, slash == std::string_view::npos ? slash : slash - start));
        if (slash == std::string_view::npos) {
            return parts;
        }
        start = slash + 1;
    }
}

// NFC is the identity on ASCII; non-ASCII text is left as is (see NameNormalization).
std::string nfc(std::string_view text) {
    return std::string(text);
}

// Lowercases ASCII letters; non-ASCII text is left as is (no Unicode case tables are linked).
std::string lower(std::string_view text) {
    std::string lowered(text);
    std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](char c) {
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return lowered;
}

// The three transfer caps of one collection pass, refusing as soon as any is crossed.
class CapTally {
  public:
    explicit CapTally(const TransferLimits& limits) : limits_(limits) {}

    void add(const std::string& path, std::uint64_t size) {
        if (size > limits_.max_bytes_per_file) {
            throw SandboxTransferCapExceeded(fmt::format(
                "output '{}' holds {} bytes, over the per-file cap of {} bytes; write less or "
                "raise the spec's files_out limits",
                path, size, limits_.max_bytes_per_file));
        }
        if (++files_ > limits_.max_files) {
            throw SandboxTransferCapExceeded(fmt::format(
                "output '{}' is file number {}, over the cap of {} files; declare fewer outputs or "
                "raise the spec's files_out limits",
                path, files_, limits_.max_files));
        }
        total_ += size;
        if (total_ > limits_.max_total_bytes) {
            throw SandboxTransferCapExceeded(fmt::format(
                "output '{}' brings the collection to {} bytes, over the total cap of {} bytes; "
                "write less or raise the spec's files_out limits",
                path, total_, limits_.max_total_bytes));
        }
    }

    std::uint64_t remaining_total() const {
        return total_ >= limits_.max_total_bytes ? 0 : limits_.max_total_bytes - total_;
    }

  private:
    TransferLimits limits_;
    std::uint64_t files_ = 0;
    std::uint64_t total_ = 0;
};

struct PlannedOutput {
    DeclaredOutput output;
    std::string delivered_name;
};

// Runs one backend call, translating the backend's confinement and file errors into the output
// family while keeping the original nested for logs.
template <typename T>
Task<T> translated(Task<T> call, const std::string& path) {
    try {
        co_return co_await std::move(call);
    } catch (const SandboxOutputError&) {
        throw;
    } catch (const InvalidArgument& error) {
        std::throw_with_nested(SandboxOutputNotConfined(fmt::format(
            "output '{}' is not confined to the work dir ({}); declare a path inside it", path,
            error.what())));
    } catch (const FileError& error) {
        std::throw_with_nested(SandboxOutputUnreachable(fmt::format(
            "output '{}' could not be reached in the sandbox ({}); check that the program wrote "
            "it as a regular file",
            path, error.what())));
    }
}

std::string collision_message(const std::string& first, const std::string& second) {
    if (first == second) {
        return fmt::format("two outputs land under the same name '{}'; give each a distinct name",
                           second);
    }
    return fmt::format(
        "outputs '{}' and '{}' differ only in letter case or Unicode form, so they would land on "
        "one file on common file systems; give each a distinct name",
        first, second);
}

Task<LandedArtifact> land_file(std::filesystem::path root, LandingDisplay display,
                               Artifact artifact) {
    // Small, bounded writes (capped by files_out): done inline rather than off the loop.
    const auto destination = land_bytes_beneath(root, artifact.name, artifact.content);
    co_return LandedArtifact{artifact.name, display(artifact, destination), destination.string()};
}

}  // namespace

void validate_artifact_name(std::string_view name) {
    if (name.empty()) {
        invalid_name(name, "it is empty");
    }
    if (name.find('\\') != std::string_view::npos) {
        invalid_name(name, "it contains a backslash");
    }
    if (name.front() == '/') {
        invalid_name(name, "it is absolute");
    }
    const auto parts = segments(name);
    if (std::find(parts.begin(), parts.end(), "..") != parts.end()) {
        invalid_name(name, "it has a '..' segment");
    }
    for (const auto part : parts) {
        if (part.empty() || part == ".") {
            invalid_name(name, "it has an empty or '.' segment");
        }
    }
    if (std::any_of(name.begin(), name.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
        invalid_name(name, "it contains a control character");
    }
    if (!is_valid_utf8(name)) {
        invalid_name(name, "it is not valid UTF-8");
    }
    if (name.size() > kMaxArtifactNameBytes) {
        invalid_name(name, fmt::format("it is {} bytes long, over the limit of {} bytes",
                                       name.size(), kMaxArtifactNameBytes));
    }
}

std::vector<DeclaredOutput> landing_outputs(const SandboxSpec& spec) {
    std::vector<DeclaredOutput> landing;
    for (const auto& output : spec->declared_outputs) {
        if (output.disposition == OutputDisposition::land) {
            landing.push_back(output);
        }
    }
    return landing;
}

bool spec_lands_artifacts(const SandboxSpec& spec) {
    return !landing_outputs(spec).empty() || spec->outputs_named_at_call_time;
}

SandboxOutputSinkRequired missing_sink_refusal(const SandboxSpec& spec, std::string_view asked_by) {
    return SandboxOutputSinkRequired(fmt::format(
        "{} lands outputs of kind '{}' but the host configured no output sink; configure an "
        "output sink (for example a file-system sink) or declare the outputs as consumed",
        asked_by, spec->kind));
}

Task<std::vector<LandedArtifact>> collect_outputs(Sandbox& sandbox, SandboxSpec spec,
                                                  std::optional<OutputSink> sink,
                                                  std::vector<DeclaredOutput> outputs) {
    // 1. Outputs named at call time are a spec-level permission.
    if (!outputs.empty() && !spec->outputs_named_at_call_time) {
        throw InvalidArgument(fmt::format(
            "{} outputs were named at call time, but the spec of kind '{}' does not set "
            "outputs_named_at_call_time; declare them in the spec or set that flag",
            outputs.size(), spec->kind));
    }
    std::vector<DeclaredOutput> all = spec->declared_outputs;
    all.insert(all.end(), outputs.begin(), outputs.end());

    // 2. A landing output with nowhere to land is refused before anything else happens.
    const bool lands = std::any_of(all.begin(), all.end(), [](const DeclaredOutput& output) {
        return output.disposition == OutputDisposition::land;
    });
    if (lands && (!sink || !sink->deliver)) {
        throw missing_sink_refusal(spec, "collecting outputs");
    }

    // 3. Names, before the sandbox is touched.
    const bool normalise = sink && sink->normalization == NameNormalization::nfc;
    std::vector<PlannedOutput> planned;
    std::map<std::string, std::string> landed_under;  // collision key -> first delivered name
    for (const auto& output : all) {
        validate_artifact_name(output.path);
        std::string delivered;
        if (output.disposition == OutputDisposition::land) {
            delivered = output.name.value_or(output.path);
            if (normalise) {
                delivered = nfc(delivered);
            }
            if (delivered != output.path) {
                validate_artifact_name(delivered);
            }
            auto key = normpath(lower(nfc(delivered)));
            if (auto [it, inserted] = landed_under.emplace(key, delivered); !inserted) {
                throw SandboxArtifactNameCollision(collision_message(it->second, delivered));
            }
        }
        planned.push_back(PlannedOutput{output, std::move(delivered)});
    }

    // 4. Stat and cap everything in declaration order; consumed outputs count but are not read.
    const std::string work_dir = spec->work_dir.value_or("");
    CapTally stat_tally(spec->files_out);
    std::vector<std::pair<const PlannedOutput*, std::uint64_t>> to_read;
    for (const auto& plan : planned) {
        const auto& path = plan.output.path;
        const auto entry = co_await translated(sandbox.stat_file(path, work_dir), path);
        if (!entry) {
            if (plan.output.required) {
                throw SandboxOutputMissing(fmt::format(
                    "required output '{}' does not exist in the work dir; make the program write "
                    "it, or declare it optional",
                    path));
            }
            continue;
        }
        if (entry->kind != EntryKind::file) {
            throw SandboxOutputNotRegular(fmt::format(
                "output '{}' is a {}, not a regular file; only regular files are collected", path,
                to_string(entry->kind)));
        }
        if (!entry->size_bytes) {
            throw SandboxOutputSizeUnknown(fmt::format(
                "the size of output '{}' is unknown, so it is refused (unknown sizes fail "
                "closed); write it as a regular file",
                path));
        }
        stat_tally.add(path, *entry->size_bytes);
        if (plan.output.disposition == OutputDisposition::land) {
            to_read.emplace_back(&plan, *entry->size_bytes);
        }
    }

    // 5. Nothing to land.
    if (to_read.empty()) {
        co_return std::vector<LandedArtifact>{};
    }

    // 6. Read with a fresh tally; a file that grew since its stat is refused, never cut.
    CapTally read_tally(spec->files_out);
    std::vector<Artifact> artifacts;
    for (const auto& [plan, size] : to_read) {
        const auto& path = plan->output.path;
        const auto max_bytes = std::min(size, read_tally.remaining_total());
        auto content = co_await translated(sandbox.read_file(path, work_dir, max_bytes), path);
        read_tally.add(path, content.size());
        artifacts.push_back(Artifact{plan->delivered_name, std::move(content), spec->kind,
                                     plan->output.media_type});
    }

    // 7. Deliver in order; a refusal propagates and what was delivered stays delivered.
    std::vector<LandedArtifact> landed;
    for (auto& artifact : artifacts) {
        landed.push_back(co_await sink->deliver(std::move(artifact)));
    }
    co_return landed;
}

OutputSink make_file_system_sink(const std::filesystem::path& root, LandingDisplay display) {
    namespace fs = std::filesystem;
    auto resolved_root = fs::absolute(root);
    if (!display) {
        display = [](const Artifact& artifact, const fs::path&) {
            return fmt::format("{} ({} bytes)", artifact.name, artifact.content.size());
        };
    }
    // The lambda only forwards: the coroutine owns copies of everything it uses, so it never
    // depends on the lifetime of the std::function that started it.
    auto deliver = [resolved_root, display](Artifact artifact) {
        return land_file(resolved_root, display, std::move(artifact));
    };
    return OutputSink{std::move(deliver), NameNormalization::nfc};
}

}  // namespace maf_sandbox
