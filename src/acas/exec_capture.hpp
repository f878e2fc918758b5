// Bounded byte capture over the service's text-only exec (docs/acas-rest-api.md 7.7): the program's
// streams go through fifos into `head -c` files in a private scratch directory, a one-line
// manifest reports exit code and sizes, and the bytes come back in base64. Output that fits one
// answer comes back inline in the capture command itself, which then removes its scratch: a
// small exec is one guest command and one HTTP request. Larger output is read back in chunks
// with dd by further commands, then a cleanup command removes the scratch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace maf_sandbox::acas::capture {

inline constexpr std::size_t kChunkBytes = 49152;  // 48 KiB per retrieval command
inline constexpr std::size_t kManifestMaxBytes = 200;
// One retrieval answer: 64 KiB of base64, its line breaks, two token lines, JSON escaping.
inline constexpr std::size_t kRetrievalAnswerBytes = 256 * 1024;
// Both streams together up to one chunk come back inline: the capture answer then holds at most
// one chunk's base64 plus the manifest and three short token lines, so it stays inside
// kRetrievalAnswerBytes and the seed's 98,304-byte answer check, as a retrieval answer does.
inline constexpr std::size_t kInlineBytes = kChunkBytes;

// "maf-exec-<32 hex>"
std::string new_token();
std::string scratch_dir(const std::string& token);
// Where exec stages the program's stdin: a sibling of the scratch directory.
std::string stdin_file(const std::string& token);

// The capture command: checks the tools, makes the scratch directory, runs `user_command` under
// `sh -c` with its streams bounded to limit + 1 bytes each (the rest is drained), and prints
// "<token> <rc> <stdout size> <stderr size>". When the sizes together are at most kInlineBytes
// it goes on (see parse_capture for the frame): refuses a linked scratch directory or non-regular
// files (exit 1), prints both streams in base64 between token lines, removes the scratch (and the
// staged stdin file) and ends with "<token> <cleanup exit>". Otherwise the scratch is kept for
// retrieval_command and cleanup_command. With `had_stdin` the program reads stdin_file(token),
// else /dev/null.
std::string capture_command(const std::string& token, const std::string& user_command,
                            std::uint64_t limit, bool had_stdin);

struct Manifest {
    int exit_code = 0;
    std::uint64_t stdout_size = 0;
    std::uint64_t stderr_size = 0;
};
// nullopt when the answer is not exactly one well-formed manifest line for `token`.
std::optional<Manifest> parse_manifest(const std::string& token, const std::string& text);

// True when the capture command returns both streams inline for these sizes.
bool fits_inline(const Manifest& manifest);

struct Inline {
    std::string stdout_bytes;
    std::string stderr_bytes;
    int cleanup_exit = 0;  // the scratch removal's exit status; non-zero leaves the scratch
};
struct Capture {
    Manifest manifest;
    std::optional<Inline> output;  // set exactly when fits_inline(manifest)
};
// The capture command's answer: the manifest line, then, when the sizes fit inline,
// "<token>\n" <stdout base64> "\n<token>\n" <stderr base64> "\n<token> <cleanup exit>\n".
// nullopt when anything is malformed, including decoded sizes that differ from the manifest.
std::optional<Capture> parse_capture(const std::string& token, const std::string& text);

// Prints the token, `dd bs=48K skip=<chunk> count=1 | base64` of `stream` ("stdout"/"stderr"),
// then the token again; refuses a linked scratch directory or a non-regular file.
std::string retrieval_command(const std::string& token, const std::string& stream,
                              std::uint64_t chunk);
// The decoded bytes between the token lines; nullopt when the frame or base64 is malformed.
std::optional<std::string> parse_retrieval(const std::string& token, const std::string& text);

// Removes the scratch files and directory (and the staged stdin file when given).
std::string cleanup_command(const std::string& token, bool had_stdin);

}  // namespace maf_sandbox::acas::capture
