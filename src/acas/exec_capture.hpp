// Bounded byte capture over the service's text-only exec (acas-rest-api.md 7.7): the program's
// streams go through fifos into `head -c` files in a private scratch directory, a one-line
// manifest reports exit code and sizes, and the bytes come back in base64 chunks read with dd.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace maf_sandbox::acas::capture {

inline constexpr std::size_t kChunkBytes = 49152;  // 48 KiB per retrieval command
inline constexpr std::size_t kManifestMaxBytes = 200;
// One retrieval answer: 64 KiB of base64, its line breaks, two token lines, JSON escaping.
inline constexpr std::size_t kRetrievalAnswerBytes = 256 * 1024;

// "maf-exec-<32 hex>"
std::string new_token();
std::string scratch_dir(const std::string& token);

// The capture command: checks the tools, makes the scratch directory, runs `user_command` under
// `sh -c` with its streams bounded to limit + 1 bytes each (the rest is drained), and prints
// "<token> <rc> <stdout size> <stderr size>". `stdin_path` (a guest file) feeds the program's
// stdin, else /dev/null.
std::string capture_command(const std::string& token, const std::string& user_command,
                            std::uint64_t limit, const std::optional<std::string>& stdin_path);

struct Manifest {
    int exit_code = 0;
    std::uint64_t stdout_size = 0;
    std::uint64_t stderr_size = 0;
};
// nullopt when the answer is not exactly one well-formed manifest line for `token`.
std::optional<Manifest> parse_manifest(const std::string& token, const std::string& text);

// Prints the token, `dd bs=48K skip=<chunk> count=1 | base64` of `stream` ("stdout"/"stderr"),
// then the token again; refuses a linked scratch directory or a non-regular file.
std::string retrieval_command(const std::string& token, const std::string& stream,
                              std::uint64_t chunk);
// The decoded bytes between the token lines; nullopt when the frame or base64 is malformed.
std::optional<std::string> parse_retrieval(const std::string& token, const std::string& text);

// Removes the scratch files and directory (and the staged stdin file when given).
std::string cleanup_command(const std::string& token, bool had_stdin);

}  // namespace maf_sandbox::acas::capture
