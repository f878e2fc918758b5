// The exec wire's JSON (runtime/wire/exec_protocol.hpp) on arbitrary bytes: the request a
// supervisor reads (exec_call_from_json) and the result a host reads (apply_result_json).
//
// Properties, beyond not crashing: a malformed document is refused with a std::exception (the
// supervisor's handler and the host's reader catch exactly that), never undefined behaviour; an
// accepted request or result serialises (to_json) to a document that reads back to the same
// value.
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace json = boost::json;
using fuzz::require;

bool same(const ExecCall& a, const ExecCall& b) {
    return a.command == b.command && a.cwd == b.cwd && a.env == b.env &&
           a.max_output_bytes == b.max_output_bytes && a.timeout == b.timeout &&
           a.wait_for_output_eof == b.wait_for_output_eof &&
           a.kill_past_output_cap == b.kill_past_output_cap && a.interactive == b.interactive &&
           a.tty == b.tty && (!a.tty || (a.rows == b.rows && a.cols == b.cols));
}

bool same(const ExecReply& a, const ExecReply& b) {
    return a.status == b.status && a.exit_code == b.exit_code && a.stdout_total == b.stdout_total &&
           a.stderr_total == b.stderr_total && a.message == b.message;
}

void check_call(const json::value& document) {
    ExecCall call;
    try {
        call = exec_wire::exec_call_from_json(document);
    } catch (const std::exception&) {
        return;
    }
    const auto text = json::serialize(exec_wire::to_json(call));
    const auto again = exec_wire::exec_call_from_json(json::parse(text));
    require(same(call, again), "an exec request reads back to the same call", text);
}

void check_result(const json::value& document) {
    ExecReply reply;
    try {
        exec_wire::apply_result_json(document, reply);
    } catch (const std::exception&) {
        return;
    }
    const auto text = json::serialize(exec_wire::to_json(reply));
    ExecReply again;
    exec_wire::apply_result_json(json::parse(text), again);
    require(same(reply, again), "an exec result reads back to the same reply", text);
}

}  // namespace
}  // namespace maf_sandbox::runtime

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    boost::system::error_code ec;
    const auto document =
        boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec);
    if (ec) {
        return 0;
    }
    maf_sandbox::runtime::check_call(document);
    maf_sandbox::runtime::check_result(document);
    return 0;
}
