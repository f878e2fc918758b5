#include "egress_http.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "egress_decision_log.hpp"
#include "egress_hosts_file.hpp"

namespace maf_sandbox::runtime {
namespace {

std::string refusal_of(auto&& call) {
    try {
        call();
    } catch (const EgressRefusal& e) {
        return std::string(e.reason);
    }
    return "accepted";
}

TEST(EgressHttp, ParsesAnAbsoluteFormRequestHead) {
    const auto head = parse_request_head(
        "GET http://Allowed.Test:8080/a/b?c=d HTTP/1.1\r\nHost: allowed.test:8080\r\n"
        "Proxy-Authorization: secret\r\nX-Thing:  v  \r\n\r\n");
    EXPECT_EQ(head.method, "GET");
    ASSERT_EQ(head.fields.size(), 3u);
    EXPECT_EQ(head.fields[2].value, "v");
    const auto target = parse_absolute_target(head.target);
    EXPECT_EQ(target.authority.host, "allowed.test");
    EXPECT_EQ(target.authority.port, 8080);
    EXPECT_EQ(target.path, "/a/b?c=d");
    EXPECT_EQ(parse_absolute_target("http://a.test?q").path, "/?q");
    EXPECT_EQ(parse_absolute_target("http://a.test").authority.port, 80);
}

TEST(EgressHttp, RefusesAmbiguousHeads) {
    EXPECT_EQ(
        refusal_of([] { parse_request_head("GET http://a.test/ HTTP/1.1\nHost: a\r\n\r\n"); }),
        "malformed request head");
    EXPECT_EQ(
        refusal_of([] { parse_request_head("GET http://a.test/ HTTP/1.1\r\nHost : a\r\n\r\n"); }),
        "malformed header field");
    EXPECT_EQ(refusal_of([] {
                  parse_request_head("GET http://a.test/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n");
              }),
              "malformed header field");
    EXPECT_EQ(refusal_of([] { parse_request_head("GET  http://a.test/ HTTP/1.1\r\n\r\n"); }),
              "malformed request line");
    EXPECT_EQ(refusal_of([] { parse_request_head("GET http://a.test/ HTTP/2.0\r\n\r\n"); }),
              "unsupported http version");
    EXPECT_EQ(refusal_of([] {
                  using namespace std::literals;
                  parse_request_head("GET http://a.test/ HTTP/1.1\r\nX: a\0b\r\n\r\n"sv);
              }),
              "malformed header field");
}

TEST(EgressHttp, RefusesAuthoritiesThatCouldMeanTwoHosts) {
    EXPECT_EQ(refusal_of([] { parse_absolute_target("http://allowed.test@evil.test/"); }),
              "malformed authority");
    EXPECT_EQ(refusal_of([] { parse_absolute_target("https://allowed.test/"); }),
              "only http:// urls are forwarded, use CONNECT for https");
    EXPECT_EQ(refusal_of([] { parse_absolute_target("/relative"); }), "not a proxy request");
    EXPECT_EQ(refusal_of([] { parse_authority("allowed.test", std::nullopt); }),
              "connect target has no port");
    EXPECT_EQ(refusal_of([] { parse_authority("allowed.test:99999", std::nullopt); }),
              "malformed port");
    EXPECT_TRUE(parse_authority("[::1]:443", std::nullopt).ip_literal);
    EXPECT_TRUE(parse_authority("127.1:443", std::nullopt).ip_literal);
    EXPECT_EQ(refusal_of([] { parse_authority("::1:443", std::nullopt); }), "malformed authority");
}

TEST(EgressHttp, BodyFramingRefusesSmugglingShapes) {
    const auto framing_of = [](const std::string& fields) {
        return body_framing(
            parse_request_head("POST http://a.test/ HTTP/1.1\r\n" + fields + "\r\n"));
    };
    EXPECT_EQ(framing_of("Content-Length: 12\r\n").content_length, 12u);
    EXPECT_TRUE(framing_of("Transfer-Encoding: chunked\r\n").chunked);
    EXPECT_EQ(refusal_of([&] { framing_of("Content-Length: 1\r\nContent-Length: 2\r\n"); }),
              "conflicting content-length");
    EXPECT_EQ(
        refusal_of([&] { framing_of("Content-Length: 1\r\nTransfer-Encoding: chunked\r\n"); }),
        "ambiguous body framing");
    EXPECT_EQ(refusal_of([&] { framing_of("Transfer-Encoding: gzip, chunked\r\n"); }),
              "unsupported transfer-encoding");
    EXPECT_EQ(refusal_of([&] { framing_of("Content-Length: -1\r\n"); }),
              "malformed content-length");
}

TEST(EgressHttp, UpstreamHeadDropsHopByHopAndProxyFields) {
    const auto head = parse_request_head(
        "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nProxy-Authorization: secret\r\n"
        "Proxy-Connection: keep-alive\r\nConnection: X-Private, keep-alive\r\nX-Private: 1\r\n"
        "Upgrade: websocket\r\nAccept: */*\r\n\r\n");
    const auto out = upstream_request_head(head, "/x", "a.test", BodyFraming{});
    EXPECT_EQ(out, "GET /x HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

TEST(EgressHttp, ResponseHeadIsRewrittenToClose) {
    const auto out = guest_response_head(
        "HTTP/1.1 302 Found\r\nLocation: http://denied.test/\r\nConnection: keep-alive\r\n"
        "Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n");
    EXPECT_EQ(
        out,
        "HTTP/1.1 302 Found\r\nLocation: http://denied.test/\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n");
    EXPECT_THROW(guest_response_head("SSH-2.0-OpenSSH\r\n\r\n"), EgressRefusal);
}

TEST(EgressHttp, ForbiddenResponseCarriesTheReason) {
    const auto out = forbidden_response("sni mismatch");
    EXPECT_TRUE(out.starts_with("HTTP/1.1 403 Forbidden\r\nx-deny-reason: sni mismatch\r\n"));
}

TEST(EgressHostsFile, ParsesHostsFormat) {
    const auto hosts = EgressHostsFile::parse(
        "# comment\n127.0.0.1 A.test b.test # trailing\n::1 a.test\nnot-an-address c.test\n\n");
    ASSERT_EQ(hosts.lookup("a.test").size(), 2u);
    EXPECT_EQ(hosts.lookup("a.test")[1].to_string(), "::1");
    EXPECT_EQ(hosts.lookup("b.test").size(), 1u);
    EXPECT_TRUE(hosts.lookup("c.test").empty());
    EXPECT_TRUE(hosts.lookup("trailing").empty());
}

TEST(EgressDecisionLog, AppendsLinesThatReadBackAndSkipsATornLine) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("maf-egress-log-" + std::to_string(::getpid()) + ".jsonl");
    std::filesystem::remove(path);
    {
        EgressDecisionLog log(path);
        EgressDecision decision;
        decision.time =
            std::chrono::system_clock::time_point(std::chrono::milliseconds(1764417600123));
        decision.method = "CONNECT";
        decision.host = "a.test\"\n";
        decision.port = 443;
        decision.allowed = false;
        decision.reason = "sni mismatch";
        log.append(decision);
        decision.allowed = true;
        log.append(decision);
    }
    {
        std::ofstream torn(path, std::ios::app);
        torn << R"({"time":"2025-11-29T12:00:00.123Z","method":"GET)";
    }
    const auto decisions = read_egress_decisions(path);
    std::filesystem::remove(path);
    ASSERT_EQ(decisions.size(), 2u);
    EXPECT_EQ(decisions[0].host, "a.test\"\n");
    EXPECT_EQ(decisions[0].port, 443);
    EXPECT_FALSE(decisions[0].allowed);
    EXPECT_TRUE(decisions[1].allowed);
    EXPECT_EQ(decisions[0].time.time_since_epoch(), std::chrono::milliseconds(1764417600123));
    EXPECT_EQ(format_egress_decision(decisions[0]).substr(0, 34),
              R"({"time":"2025-11-29T12:00:00.123Z")");
    EXPECT_TRUE(read_egress_decisions(path).empty());  // missing file: empty log
}

}  // namespace
}  // namespace maf_sandbox::runtime
