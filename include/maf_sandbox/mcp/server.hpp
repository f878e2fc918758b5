// The Model Context Protocol server (https://modelcontextprotocol.io, revision 2025-11-25; clients
// speaking 2025-06-18, 2025-03-26, 2024-11-05 or 2024-10-07 are answered in their version, as the
// official SDKs' clients expect). JSON-RPC 2.0 over any
// transport: a transport opens one McpSession per MCP session and feeds it message texts.
//
// The tools are the kinds: `execute_code` (codeact) and `run_shell` (shell), and with execute_code
// `upload_file` and `download_file` (kinds::ConversationFiles) into the same sandbox. A sandbox
// key's scope and agent come from the server configuration and its thread is the MCP session id:
// no tool argument can set or change it. Closing a session disposes its sandboxes.
//
// Files an execute_code call returns (its outputs) land under `out_dir/<session>/<call>/` and
// come back in the result: images inline as `image` content up to a cap, every file as a
// `resource_link` to a URI the session serves through resources/read and lists in
// resources/list. The URIs carry random tokens and end with the session.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/kinds/codeact.hpp"
#include "maf_sandbox/kinds/shell.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::mcp {

inline constexpr std::string_view kLatestProtocolVersion = "2025-11-25";

// The default of McpServerConfig::max_session_sandboxes (`--max-session-sandboxes`).
inline constexpr std::size_t kDefaultMaxSessionSandboxes = 8;
// The defaults of McpServerConfig::max_inline_image_bytes and max_session_resource_bytes.
inline constexpr std::uint64_t kDefaultMaxInlineImageBytes = 1024 * 1024;
inline constexpr std::uint64_t kDefaultMaxSessionResourceBytes = 64 * 1024 * 1024;

// Every protocol revision this server speaks, newest first.
const std::vector<std::string>& supported_protocol_versions();

// The version the server answers an initialize with: the client's when supported, else the
// latest.
std::string negotiate_protocol_version(std::string_view requested);

struct McpServerConfig {
    std::string server_name = "maf-sandbox";
    std::string server_version = "0.0.0";
    // The sandbox key's scope and agent for every session of this server.
    std::string scope = "maf-sandbox-mcp";
    std::string agent_dir = "mcp";
    // The sandbox key's thread for every session (`--thread`); empty: each session's own id.
    // Servers given the same scope and thread share their sandboxes, each recording itself as a
    // co-owner with the local backend; a session that ends still disposes them, as before (the
    // backend then only gives up its own part while another server uses them).
    std::string thread;
    // How long closing a session may take (cancelling calls, then disposing).
    Seconds close_timeout{1.5};
    // How many sandboxes one session may hold at once; a tool call beyond it is refused with a
    // tool error (isError) and runs nothing. At least 1.
    std::size_t max_session_sandboxes = kDefaultMaxSessionSandboxes;
    // Progress notifications of a call whose request carries `_meta.progressToken`: the call's
    // stages at once; the program's new output lines (where the backend streams) at most once
    // per interval, coalesced, the latest kept within progress_message_bytes; and, when nothing
    // else was sent for progress_heartbeat, a heartbeat ("still running after N s"), so a client
    // whose request timeout resets on progress waits for a long call on every backend.
    std::chrono::milliseconds progress_interval{250};
    std::chrono::milliseconds progress_heartbeat{5000};
    std::size_t progress_message_bytes = 4096;
    // Where returned files land, each call in a fresh `<session>/<call>/` directory (`--out-dir`);
    // unset: they are only handed back to the client.
    std::optional<std::filesystem::path> out_dir;
    // Images up to this many bytes come back inline as `image` content (larger ones only as a
    // resource link).
    std::uint64_t max_inline_image_bytes = kDefaultMaxInlineImageBytes;
    // Bytes of returned files one session keeps for resources/read; past it the oldest go.
    std::uint64_t max_session_resource_bytes = kDefaultMaxSessionResourceBytes;
    // Offer upload_file and download_file alongside execute_code (not at isolation scope call,
    // where nothing would persist between calls).
    bool file_tools = true;
};

// Sends one JSON-RPC message text (a notification) to the session's client.
using MessageSink = std::function<void(std::string message)>;

class McpServer;

// One MCP session. Single-threaded: use it from the executor it was opened on.
class McpSession {
  public:
    ~McpSession();
    McpSession(const McpSession&) = delete;
    McpSession& operator=(const McpSession&) = delete;

    const std::string& id() const;
    bool initialized() const;
    // The protocol version negotiated by initialize (empty before).
    const std::string& protocol_version() const;

    // Handles one message text. Returns the response text for a request, nullopt for a
    // notification, a client response, or a request that was cancelled (the protocol sends no
    // response then). Malformed input is answered with a JSON-RPC error (-32700 parse error,
    // -32600 invalid request, -32601 unknown method, -32602 invalid params). Requests run
    // concurrently; notifications/cancelled cancels one in flight, which still cleans up.
    // Notifications about this request (its progress) go to `related` when set (a transport that
    // answers each request on its own stream), else to the session's sink.
    Task<std::optional<std::string>> handle(std::string text, MessageSink related = {});

    // Cancels every call in flight, waits for them (bounded by the server's close_timeout) and
    // disposes the session's sandboxes (router dispose_scope(scope, session id)). Idempotent;
    // never throws. Afterwards every request is refused.
    Task<void> close();

    // Where notifications (progress) go; unset drops them.
    void set_message_sink(MessageSink sink);

  private:
    friend class McpServer;
    struct Impl;
    explicit McpSession(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> impl_;
};

class McpServer {
  public:
    // Either tool may be null (it is then not offered). `log` receives the details the model never
    // sees, and one line per session end naming how many sandboxes were disposed.
    McpServer(McpServerConfig config, std::shared_ptr<SandboxRouter> router,
              std::shared_ptr<kinds::CodeActTool> codeact, std::shared_ptr<kinds::ShellTool> shell,
              std::shared_ptr<spdlog::logger> log);
    ~McpServer();
    McpServer(const McpServer&) = delete;
    McpServer& operator=(const McpServer&) = delete;

    const McpServerConfig& config() const;

    // Opens a session whose id (the sandbox key's thread) is `session_id`, or a fresh random one
    // when empty.
    std::shared_ptr<McpSession> open_session(std::string session_id = {});

    // The tools/list result (a JSON object text) as a client of `protocol_version` sees it.
    std::string tools_list(std::string_view protocol_version = kLatestProtocolVersion) const;

  private:
    friend class McpSession;
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

// A random 32-hex-digit session id.
std::string new_session_id();

}  // namespace maf_sandbox::mcp
