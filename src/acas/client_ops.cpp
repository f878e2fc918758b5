// The data-plane operations: routes and payloads of docs/acas-rest-api.md section 4.
#include <fmt/format.h>
#include <spdlog/logger.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "client_impl.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "wire.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

[[noreturn]] void raise_status(const net::HttpResponse& response, std::string_view what) {
    const auto code = detail::problem_code(response.body);
    if (response.status == 400 && code == "PermissionDenied") {
        // The guest's own permissions refused a file-plane operation (acas-emulator's answer; a
        // 403 would be a role assignment, handled in send): the protocol's permission refusal.
        throw SandboxFilePermissionRefused(fmt::format(
            "the sandbox's permissions refused to {} (HTTP 400, PermissionDenied)", what));
    }
    throw AcasServiceError(fmt::format("the ACAS service refused to {} (HTTP {}{}{})", what,
                                       response.status, code.empty() ? "" : ", ", code),
                           response.status, code);
}

json::value parse_json(const net::HttpResponse& response, std::string_view what) {
    boost::system::error_code error;
    auto value = json::parse(response.body, error);
    if (error) {
        throw AcasServiceError(
            fmt::format("the ACAS answer to {} is not JSON; check the endpoint", what),
            response.status, "MalformedAnswer");
    }
    return value;
}

std::string path_query(std::string_view path) {
    return "path=" + net::percent_encode(path, true);
}

bool state_is(const std::string& state, std::string_view wanted) {
    return net::iequals(state, wanted);
}

Task<void> pause(asio::any_io_executor executor, Seconds interval, Deadline deadline) {
    asio::steady_timer timer(executor);
    const auto until = std::min(deadline, deadline_after(interval));
    timer.expires_at(until);
    co_await timer.async_wait(asio::use_awaitable);
}

}  // namespace

Task<SandboxInfo> AcasClient::create_sandbox(CreateSandboxRequest request, Deadline deadline) {
    const auto body = json::serialize(wire::create_body(request));
    auto response = co_await impl_->send("PUT", url("/sandboxes"), body, "application/json",
                                         Replay::throttle_only, deadline);
    if (response.status >= 300)
        raise_status(response, "create a sandbox");
    auto info = wire::parse_sandbox(parse_json(response, "create"));
    if (info.id.empty()) {
        throw AcasServiceError("the ACAS create answer named no sandbox id", response.status,
                               "MalformedAnswer");
    }
    co_return info;
}

Task<std::optional<SandboxInfo>> AcasClient::get_sandbox(std::string id, Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response =
        co_await impl_->send("GET", url("/sandboxes/" + id), {}, {}, Replay::idempotent, deadline);
    if (response.status == 404)
        co_return std::nullopt;
    if (response.status >= 300)
        raise_status(response, "read a sandbox");
    co_return wire::parse_sandbox(parse_json(response, "get sandbox"));
}

Task<std::vector<SandboxInfo>> AcasClient::list_sandboxes(std::map<std::string, std::string> labels,
                                                          Deadline deadline) {
    std::string selector;
    for (const auto& [key, value] : labels) {
        if (!selector.empty())
            selector += ',';
        selector += key + "=" + value;
    }
    std::string next =
        url("/sandboxes", selector.empty() ? "" : "labels=" + net::percent_encode(selector, true));
    std::vector<SandboxInfo> out;
    for (int page = 0; !next.empty(); ++page) {
        if (page > 1000) {
            throw AcasServiceError("the ACAS listing did not end after 1000 pages", 0, "Paging");
        }
        auto response = co_await impl_->send("GET", next, {}, {}, Replay::idempotent, deadline);
        if (response.status >= 300)
            raise_status(response, "list sandboxes");
        auto value = parse_json(response, "list sandboxes");
        next.clear();
        const json::array* items = nullptr;
        if (value.is_array()) {
            items = &value.as_array();
        } else if (value.is_object()) {
            const auto& object = value.as_object();
            if (const auto* v = object.if_contains("value"); v && v->is_array())
                items = &v->as_array();
            if (const auto* link = object.if_contains("nextLink");
                link && link->is_string() && !link->as_string().empty()) {
                next = std::string(link->as_string());
                wire::require_same_origin(next, impl_->endpoint_host, impl_->endpoint_port);
            }
        }
        if (items == nullptr) {
            throw AcasServiceError("the ACAS listing has no list of sandboxes", response.status,
                                   "MalformedAnswer");
        }
        for (const auto& item : *items) {
            auto info = wire::parse_sandbox(item);
            // The service filters by label; checking again keeps a lax server from widening a
            // purge.
            bool matches = true;
            for (const auto& [key, value] : labels) {
                const auto found = info.labels.find(key);
                matches = matches && found != info.labels.end() && found->second == value;
            }
            if (matches && !info.id.empty())
                out.push_back(std::move(info));
        }
    }
    co_return out;
}

Task<bool> AcasClient::delete_sandbox(std::string id, Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response = co_await impl_->send("DELETE", url("/sandboxes/" + id), {}, {},
                                         Replay::idempotent, deadline);
    if (response.status == 404)
        co_return false;
    if (response.status >= 300)
        raise_status(response, "delete a sandbox");
    co_return true;
}

Task<SandboxInfo> AcasClient::wait_until_running(std::string id, Seconds interval,
                                                 Deadline deadline) {
    for (;;) {
        auto info = co_await get_sandbox(id, deadline);
        if (info) {
            if (state_is(info->state, "Running"))
                co_return *info;
            if (state_is(info->state, "Failed") || state_is(info->state, "Deleting")) {
                throw AcasServiceError(
                    fmt::format("sandbox {} reached state {} instead of Running", id, info->state),
                    0, info->state);
            }
        }
        if (SteadyClock::now() >= deadline) {
            throw Timeout(fmt::format("sandbox {} was not Running before its deadline", id));
        }
        co_await pause(impl_->executor, interval, deadline);
    }
}

Task<void> AcasClient::wait_until_deleted(std::string id, Seconds interval, Deadline deadline) {
    for (;;) {
        const auto still_there = co_await get_sandbox(id, deadline);
        if (!still_there)
            break;
        if (SteadyClock::now() >= deadline) {
            throw Timeout(fmt::format("sandbox {} was still present at its deadline", id));
        }
        co_await pause(impl_->executor, interval, deadline);
    }
}

Task<SandboxInfo> AcasClient::ensure_running(std::string id, Seconds interval, Deadline deadline) {
    auto info = co_await get_sandbox(id, deadline);
    if (!info) {
        throw AcasServiceError(fmt::format("sandbox {} no longer exists", id), 404,
                               "SandboxNotFound");
    }
    if (state_is(info->state, "Running"))
        co_return *info;
    if (state_is(info->state, "Deleting") || state_is(info->state, "Failed")) {
        throw AcasServiceError(fmt::format("sandbox {} is {}", id, info->state), 0, info->state);
    }
    if (state_is(info->stopped_reason, "Disabled")) {
        throw AcasServiceError(fmt::format("sandbox {} was disabled by the service", id), 0,
                               "SandboxDisabled");
    }
    if (state_is(info->state, "Stopped") || state_is(info->state, "Suspended") ||
        state_is(info->state, "Idle")) {
        // A conflict here usually means it is already resuming; the poll below decides.
        auto response = co_await impl_->send("POST", url("/sandboxes/" + id + "/resume"), "{}",
                                             "application/json", Replay::throttle_only, deadline);
        impl_->options.log->debug("resume of {} answered {}", id, response.status);
    }
    co_return co_await wait_until_running(id, interval, deadline);
}

Task<void> AcasClient::set_lifecycle(std::string id, LifecyclePolicy policy, Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    // POST lifecycle replaces the whole policy, so repeating it is harmless: idempotent.
    auto response = co_await impl_->send("POST", url("/sandboxes/" + id + "/lifecycle"),
                                         json::serialize(wire::lifecycle_body(policy)),
                                         "application/json", Replay::idempotent, deadline);
    if (response.status >= 300)
        raise_status(response, "set the lifecycle policy");
}

Task<ExecAnswer> AcasClient::exec(std::string id, std::string command,
                                  std::optional<std::string> working_directory, Deadline deadline,
                                  std::size_t max_response_bytes) {
    require_path_segment(id, "the sandbox id");
    json::object body{{"command", command}};
    if (working_directory)
        body["workingDirectory"] = *working_directory;
    auto response = co_await impl_->send("POST", url("/sandboxes/" + id + "/executeShellCommand"),
                                         json::serialize(body), "application/json", Replay::exec,
                                         deadline, max_response_bytes);
    if (response.status >= 300)
        raise_status(response, "run a command");
    if (const auto encoding = response.headers.get("Content-Encoding");
        encoding && !net::iequals(*encoding, "identity")) {
        throw AcasServiceError("the exec answer came compressed although identity was asked for",
                               response.status, "ContentEncoding");
    }
    co_return wire::parse_exec_answer(parse_json(response, "exec"));
}

Task<std::optional<json::object>> AcasClient::stat_raw(std::string id, std::string path,
                                                       Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response =
        co_await impl_->send("GET", url("/sandboxes/" + id + "/files/stat", path_query(path)), {},
                             {}, Replay::idempotent, deadline, kMiB);
    if (response.status == 404)
        co_return std::nullopt;
    if (response.status >= 300)
        raise_status(response, "stat a file");
    auto value = parse_json(response, "stat");
    if (!value.is_object()) {
        throw AcasEntryPayloadIncomplete(
            "the ACAS stat answer is not an object; the entry cannot be classified");
    }
    co_return std::move(value.as_object());
}

Task<std::optional<json::object>> AcasClient::list_raw(std::string id, std::string path,
                                                       Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response =
        co_await impl_->send("GET", url("/sandboxes/" + id + "/files/list", path_query(path)), {},
                             {}, Replay::idempotent, deadline, 16 * kMiB);
    if (response.status == 404)
        co_return std::nullopt;
    if (response.status >= 300)
        raise_status(response, "list a directory");
    auto value = parse_json(response, "list");
    if (!value.is_object()) {
        throw AcasEntryPayloadIncomplete("the ACAS listing is not an object");
    }
    co_return std::move(value.as_object());
}

Task<std::optional<std::string>> AcasClient::read_file(std::string id, std::string path,
                                                       std::uint64_t max_bytes, Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    net::HttpResponse response;
    try {
        response = co_await impl_->send("GET", url("/sandboxes/" + id + "/files", path_query(path)),
                                        {}, {}, Replay::idempotent, deadline,
                                        static_cast<std::size_t>(max_bytes) + 64 * 1024);
    } catch (const AcasServiceError& e) {
        if (e.code() == "ResponseTooLarge") {
            throw SandboxTransferCapExceeded(fmt::format(
                "the file is larger than the {}-byte cap; it was refused, not truncated",
                max_bytes));
        }
        throw;
    }
    if (response.status == 404)
        co_return std::nullopt;
    if (response.status >= 300)
        raise_status(response, "read a file");
    if (response.body.size() > max_bytes) {
        throw SandboxTransferCapExceeded(fmt::format(
            "the file is larger than the {}-byte cap; it was refused, not truncated", max_bytes));
    }
    co_return std::move(response.body);
}

Task<void> AcasClient::write_file(std::string id, std::string path, std::string bytes,
                                  Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response = co_await impl_->send(
        "PUT", url("/sandboxes/" + id + "/files", path_query(path) + "&createDirs=true"),
        std::move(bytes), "application/octet-stream", Replay::idempotent, deadline);
    if (response.status >= 300)
        raise_status(response, "write a file");
}

Task<bool> AcasClient::delete_file(std::string id, std::string path, bool recursive,
                                   Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    auto response = co_await impl_->send(
        "DELETE",
        url("/sandboxes/" + id + "/files",
            path_query(path) + (recursive ? "&recursive=true" : "&recursive=false")),
        {}, {}, Replay::idempotent, deadline);
    if (response.status == 404)
        co_return false;
    if (response.status >= 300)
        raise_status(response, "delete a file");
    co_return true;
}

Task<void> AcasClient::mkdir(std::string id, std::string path, Deadline deadline) {
    require_path_segment(id, "the sandbox id");
    // mkdir is `mkdir -p`: repeating it is harmless.
    json::object body;
    body["path"] = path;
    auto response = co_await impl_->send("POST", url("/sandboxes/" + id + "/files/mkdir"),
                                         json::serialize(body), "application/json",
                                         Replay::idempotent, deadline);
    if (response.status >= 300)
        raise_status(response, "create a directory");
}

Task<std::vector<std::string>> AcasClient::list_prebuilt_images(Deadline deadline) {
    std::vector<std::string> names;
    std::string next = url("/diskimages/public");
    while (!next.empty()) {
        auto response = co_await impl_->send("GET", next, {}, {}, Replay::idempotent, deadline);
        if (response.status >= 300)
            raise_status(response, "list the prebuilt images");
        auto page = wire::parse_page(parse_json(response, "list prebuilt images"));
        next = page.next_link;
        if (!next.empty())
            wire::require_same_origin(next, impl_->endpoint_host, impl_->endpoint_port);
        for (const auto& item : page.items) {
            if (item.is_object()) {
                if (const auto* name = item.as_object().if_contains("name");
                    name && name->is_string() && !name->as_string().empty()) {
                    names.emplace_back(name->as_string());
                }
            }
        }
    }
    co_return names;
}

Task<std::vector<DiskImageInfo>> AcasClient::list_disk_images(Deadline deadline) {
    std::vector<DiskImageInfo> images;
    std::string next = url("/diskimages");
    while (!next.empty()) {
        auto response = co_await impl_->send("GET", next, {}, {}, Replay::idempotent, deadline);
        if (response.status >= 300)
            raise_status(response, "list the disk images");
        auto page = wire::parse_page(parse_json(response, "list disk images"));
        next = page.next_link;
        if (!next.empty())
            wire::require_same_origin(next, impl_->endpoint_host, impl_->endpoint_port);
        for (const auto& item : page.items)
            images.push_back(wire::parse_disk_image(item));
    }
    co_return images;
}

Task<DiskImageInfo> AcasClient::create_disk_image(std::string base, std::optional<std::string> name,
                                                  Deadline deadline) {
    json::object body{{"image", json::object{{"base", base}}}};
    if (name)
        body["labels"] = json::object{{"name", *name}};
    auto response = co_await impl_->send("PUT", url("/diskimages"), json::serialize(body),
                                         "application/json", Replay::throttle_only, deadline);
    if (response.status >= 300)
        raise_status(response, "import a disk image");
    co_return wire::parse_disk_image(parse_json(response, "create disk image"));
}

Task<std::optional<DiskImageInfo>> AcasClient::get_disk_image(std::string id, Deadline deadline) {
    require_path_segment(id, "the disk image id");
    auto response =
        co_await impl_->send("GET", url("/diskimages/" + id), {}, {}, Replay::idempotent, deadline);
    if (response.status == 404)
        co_return std::nullopt;
    if (response.status >= 300)
        raise_status(response, "read a disk image");
    co_return wire::parse_disk_image(parse_json(response, "get disk image"));
}

}  // namespace maf_sandbox::acas
