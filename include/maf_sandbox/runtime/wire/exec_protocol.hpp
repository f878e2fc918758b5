// The wire between the host and a sandbox's supervisor: one unix-socket connection per exec.
//
// Frames are a type byte, a 4-byte little-endian length and the payload. The host sends 'R' (the
// request as JSON) and 'I' (the stdin bytes, raw); the supervisor answers with 'O' / 'E' chunks
// (stdout / stderr, never more than max_output_bytes per stream in total), each sent as soon as
// it was read from the program's pipe, so a host sees output while the program runs, and one
// final 'X' (the outcome as JSON). A host that reads slowly holds the supervisor's writes, which
// holds the program's (its pipes fill); the supervisor's deadline still holds. Output beyond the
// cap is drained and counted on the supervisor's side, never buffered, so memory stays constant on
// both sides whatever the program writes. Closing the connection early kills the exec's whole
// process tree.
//
// An interactive exec (`interactive` in the request) keeps the connection a two-way stream after
// the request: the host sends 'i' frames (more stdin, an empty one closes it) and, with a
// terminal (`tty`), 'W' frames (the window's new size); the program's output comes as 'O'
// frames. Hosts that never set `interactive` see the exchange above unchanged. A supervisor that
// predates the fields would take the first 'i' frame for a hang-up and end the exec, so hosts send
// interactive calls only where the backend declares Capability::terminal.
#pragma once

#include <sys/un.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <boost/json/value.hpp>

namespace maf_sandbox::runtime {

struct ExecCall {
    // argv (executed directly, never through a shell; PATH from `env` is searched) or a shell
    // command line (run with /bin/sh -c).
    std::variant<std::vector<std::string>, std::string> command;
    std::string cwd;                                       // absolute guest path; "" = default
    std::vector<std::pair<std::string, std::string>> env;  // added to the image's environment
    std::string stdin_bytes;
    std::uint64_t max_output_bytes = 1024 * 1024;  // per stream
    std::chrono::milliseconds timeout{60000};
    // The ACAS service's exec semantics (the acas-emulator sets both): answer only at EOF of
    // stdout and stderr, so a background process that inherited them is waited for (within
    // `timeout`); and kill the exec's tree as soon as a stream passes max_output_bytes, which
    // then reports exit 137. Off, the exec answers when the program exits (a short drain window
    // collects output in flight) and output past the cap is drained and counted.
    bool wait_for_output_eof = false;
    bool kill_past_output_cap = false;
    // Stdin stays open after the request: 'i' frames carry more of it until an empty one.
    bool interactive = false;
    // A terminal in the guest: the program's stdin, stdout and stderr are a pseudo-terminal of
    // the sandbox's own devpts and its controlling terminal, so ^C typed into it reaches the
    // program as SIGINT through the guest's line discipline. Implies `interactive`; its output
    // comes as stdout only.
    bool tty = false;
    std::uint16_t rows = 24;  // the terminal's size at start (tty only)
    std::uint16_t cols = 80;
};

enum class ExecStatus {
    exited,     // the program finished; exit_code is its status (128 + N for signal N)
    timed_out,  // the deadline passed and the whole tree was killed
    failed,     // the supervisor could not run it (message says why)
};

struct ExecReply {
    ExecStatus status = ExecStatus::failed;
    int exit_code = -1;
    std::string stdout_head;  // at most max_output_bytes
    std::string stderr_head;
    std::uint64_t stdout_total = 0;  // every byte the program wrote, kept or not
    std::uint64_t stderr_total = 0;
    std::string message;
    std::uint64_t oom_kills = 0;  // the OOM killer's kills in the sandbox while the exec ran

    bool truncated() const noexcept {
        return stdout_total > stdout_head.size() || stderr_total > stderr_head.size();
    }
};

// How long a host waits past an exec's own timeout (which the supervisor enforces) before it
// gives up on the supervisor and closes the connection.
inline constexpr std::chrono::milliseconds kExecGrace{5000};

// Runs one exec against the supervisor listening on `socket` and blocks until it finishes. The
// supervisor enforces `call.timeout`; this side gives up `grace` later (closing the connection,
// which kills the tree). Throws SandboxOutputUnreachable when the supervisor cannot be reached or
// hangs up, InvalidArgument when the call itself is malformed (NUL in argv or env, a relative cwd).
// LocalSandbox runs the same exchange without blocking (maf_sandbox/local/exec_client.hpp).
// `on_output`, when set, is called with each output frame's type (exec_wire::kStdout or kStderr)
// and bytes as it arrives, before the next is read; the reply still carries the capture.
using ExecOutputCallback = std::function<void(char type, std::string_view bytes)>;
ExecReply call_exec(const std::filesystem::path& socket, const ExecCall& call,
                    std::chrono::milliseconds grace = kExecGrace,
                    const ExecOutputCallback& on_output = {});

// --- Shared by every host-side client of the wire (blocking here, asynchronous in LocalSandbox),
// so that each refuses, words its errors and caps output the same way. ---------------------------

// Throws InvalidArgument when the call is malformed: an empty argv, a NUL byte in the command,
// working directory or environment, a relative working directory, an empty environment name or
// one with '='. Checked before connecting.
void validate_exec_call(const ExecCall& call);

// The address of the supervisor's socket. Throws InvalidArgument when the path is too long.
sockaddr_un supervisor_address(const std::filesystem::path& socket);

// How an exec's conversation with the supervisor failed; each has one wording.
enum class ExecLinkFailure {
    // Connecting failed (detail: the system's reason).
    refused,
    // The connection broke while the request was sent.
    hung_up_on_request,
    // The connection broke, or the peer announced a frame larger than the wire allows.
    hung_up,
    // No result within the exec's timeout plus the grace period.
    no_answer,
    // The result frame did not parse (detail: why).
    malformed_result,
};

// Throws SandboxOutputUnreachable naming the socket, what failed and what to do (acquire the
// sandbox again).
[[noreturn]] void throw_exec_link_failure(const std::filesystem::path& socket,
                                          ExecLinkFailure failure, std::string_view detail = {});

// A connected stream socket to the supervisor at `socket` (close-on-exec). Throws
// SandboxOutputUnreachable (refused) when nothing answers there, InvalidArgument when the path is
// too long for a socket address.
int connect_supervisor(const std::filesystem::path& socket);

// The host's reading of the supervisor's answer, frame by frame, however the frames are read:
// keeps at most `max_output_bytes` of each stream (a chunk that would pass the cap is dropped;
// the totals in the result still count it) and completes the reply at the result frame.
class ExecReplyCollector {
  public:
    ExecReplyCollector(std::filesystem::path socket, std::uint64_t max_output_bytes);
    // True once the result frame arrived: reply() is then complete. Frames of unknown type are
    // ignored. Throws SandboxOutputUnreachable (malformed_result) when the result does not parse.
    bool take(char type, std::string_view payload);
    ExecReply& reply() noexcept { return reply_; }

  private:
    std::filesystem::path socket_;
    std::uint64_t max_output_bytes_;
    ExecReply reply_;
};

namespace exec_wire {

inline constexpr char kRequest = 'R';
inline constexpr char kStdin = 'I';
inline constexpr char kStdout = 'O';
inline constexpr char kStderr = 'E';
inline constexpr char kResult = 'X';
// Interactive execs only (host to supervisor, after the request and stdin frames).
inline constexpr char kStdinMore = 'i';  // more stdin; an empty payload closes it
inline constexpr char kResize = 'W';     // the terminal's size: rows, then cols, 2 bytes LE each
// The largest 'i' payload a host sends, and the most stdin the supervisor holds unwritten before
// it stops reading the connection (the host then waits, as a full pipe makes a writer wait).
inline constexpr std::uint32_t kMaxStdinChunk = 64u << 10;
// Largest request header and stdin the supervisor accepts.
inline constexpr std::uint32_t kMaxRequestBytes = 4u << 20;
inline constexpr std::uint32_t kMaxStdinBytes = 1u << 30;

inline constexpr std::size_t kFrameHeaderBytes = 5;

// A frame's header: the type byte, then the payload size (little-endian).
std::array<char, kFrameHeaderBytes> frame_header(char type, std::uint32_t payload_size) noexcept;
// The payload size a header announces (its type is header[0]).
std::uint32_t frame_payload_size(const char* header) noexcept;
// What a host sends ahead of the stdin bytes: the whole request frame and the stdin frame's
// header. The stdin bytes follow as they are (never copied into one buffer with the rest).
std::string request_prefix(const ExecCall& call);

// Appends one whole frame (header, then payload) to `out`.
void append_frame(std::string& out, char type, std::string_view payload);

// Blocking; EINTR-safe. write_frame returns false when the peer is gone.
bool write_frame(int fd, char type, std::string_view payload) noexcept;
// Reads one frame with at most `max_payload` bytes; false on EOF, error or oversize.
bool read_frame(int fd, char& type, std::string& payload, std::uint32_t max_payload);

// A 'W' frame's payload, and its reading (false when it is not 4 bytes).
std::string resize_payload(std::uint16_t rows, std::uint16_t cols);
bool parse_resize(std::string_view payload, std::uint16_t& rows, std::uint16_t& cols) noexcept;

// What one frame from an interactive exec's host asks of the supervisor. `bytes` views the
// payload the frame was parsed from.
struct HostFrame {
    enum class Kind { more_stdin, close_stdin, resize };
    Kind kind = Kind::more_stdin;
    std::string_view bytes;  // more_stdin: never empty
    std::uint16_t rows = 0;  // resize
    std::uint16_t cols = 0;
};
// The supervisor's reading of a host's frame after the request: an 'i' of at most kMaxStdinChunk
// bytes (empty: stdin closes), or, on a terminal (`tty`), a 'W' of exactly 4 bytes. nullopt for
// what no host sends: any other type, a 'W' without a terminal, a 'W' of another size, an 'i'
// past the chunk size. The supervisor ends the exec on nullopt, as on a hang-up.
std::optional<HostFrame> parse_host_frame(char type, std::string_view payload, bool tty) noexcept;

boost::json::value to_json(const ExecCall& call);  // everything but stdin
// Throws std::exception (boost's system_error or std::out_of_range / invalid_argument) for a
// malformed request: not an object, a missing or mistyped field, `interactive` or `tty` present
// but not a boolean, a terminal without `rows` and `cols` that fit 16 bits.
ExecCall exec_call_from_json(const boost::json::value& json);
boost::json::value to_json(const ExecReply& reply);  // everything but the heads
void apply_result_json(const boost::json::value& json, ExecReply& reply);

}  // namespace exec_wire

}  // namespace maf_sandbox::runtime
