// Internal: how the emulator's answers look on the wire: JSON and empty answers, a Refusal as the
// service's problem+json, a request body as a JSON object, and the wrapper that turns whatever a
// handler throws into one of those answers.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <memory>
#include <string>

#include "http_face.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {

net::HttpResponse json_response(int status, const boost::json::value& body);
net::HttpResponse empty_response(int status);
// application/problem+json: {title, status, detail, errorCode}, or {title, status, errors} for a
// Refusal with field_errors. Request text quoted in it becomes valid UTF-8.
net::HttpResponse problem_response(const Refusal& refusal);

// The body as a JSON object; an empty body is {} when `allow_empty`. Refuses 400 otherwise.
boost::json::object parse_object_body(const std::string& body, bool allow_empty);

// Answers every exception `inner` throws: a Refusal as itself; a state record too large 413; a
// state save that failed 507 or 500 (the change was undone, a client may retry); anything else
// 500 with a fixed sentence naming the request id (the log has the reason, which may name host
// paths).
Handler with_refusals(Handler inner, std::shared_ptr<spdlog::logger> logger);

}  // namespace maf_sandbox::emulator
