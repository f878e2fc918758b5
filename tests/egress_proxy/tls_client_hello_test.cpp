#include "tls_client_hello.hpp"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace maf_sandbox::runtime {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Status = ClientHello::Status;

// The first flight of a real OpenSSL client (memory BIOs: nothing touches the network).
Bytes openssl_client_hello(const char* server_name) {
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                              SSL_CTX_free);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), SSL_free);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);  // ssl owns both
    if (server_name) {
        SSL_set_tlsext_host_name(ssl.get(), server_name);
    }
    EXPECT_EQ(SSL_connect(ssl.get()), -1);  // waits for the server: the hello is written
    Bytes hello(static_cast<std::size_t>(BIO_ctrl_pending(out)));
    EXPECT_EQ(BIO_read(out, hello.data(), static_cast<int>(hello.size())),
              static_cast<int>(hello.size()));
    return hello;
}

void put16(Bytes& out, std::size_t value) {
    out.push_back(static_cast<std::uint8_t>(value >> 8));
    out.push_back(static_cast<std::uint8_t>(value));
}

Bytes extension(std::uint16_t type, const Bytes& data) {
    Bytes out;
    put16(out, type);
    put16(out, data.size());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

Bytes server_name_data(const std::vector<std::string>& names) {
    Bytes list;
    for (const auto& name : names) {
        list.push_back(0);
        put16(list, name.size());
        list.insert(list.end(), name.begin(), name.end());
    }
    Bytes data;
    put16(data, list.size());
    data.insert(data.end(), list.begin(), list.end());
    return data;
}

// A minimal ClientHello by hand, in `records` records of (roughly) equal size.
Bytes hand_hello(const std::vector<Bytes>& extensions, int records = 1) {
    Bytes body{3, 3};
    body.resize(body.size() + 32, 0xab);
    body.push_back(0);                            // session id
    body.insert(body.end(), {0, 2, 0x13, 0x01});  // one cipher suite
    body.insert(body.end(), {1, 0});              // null compression
    Bytes all;
    for (const auto& e : extensions) {
        all.insert(all.end(), e.begin(), e.end());
    }
    put16(body, all.size());
    body.insert(body.end(), all.begin(), all.end());
    Bytes message{1, 0};
    put16(message, body.size());
    message.insert(message.end(), body.begin(), body.end());
    Bytes out;
    const std::size_t step = (message.size() + records - 1) / records;
    for (std::size_t at = 0; at < message.size(); at += step) {
        const auto size = std::min(step, message.size() - at);
        out.insert(out.end(), {22, 3, 1});
        put16(out, size);
        out.insert(out.end(), message.begin() + static_cast<long>(at),
                   message.begin() + static_cast<long>(at + size));
    }
    return out;
}

TEST(TlsClientHello, ReadsTheServerNameOfARealOpenSslHello) {
    const auto hello = parse_client_hello(openssl_client_hello("Allowed.Test"));
    EXPECT_EQ(hello.status, Status::complete);
    EXPECT_EQ(hello.server_name, "Allowed.Test");
    EXPECT_FALSE(hello.encrypted_server_name);
}

TEST(TlsClientHello, AHelloWithoutServerNameIsCompleteAndNamesNothing) {
    const auto hello = parse_client_hello(openssl_client_hello(nullptr));
    EXPECT_EQ(hello.status, Status::complete);
    EXPECT_EQ(hello.server_name, "");
}

TEST(TlsClientHello, EveryTruncationIsIncompleteNeverAName) {
    const auto bytes = openssl_client_hello("allowed.test");
    for (std::size_t size = 0; size < bytes.size(); ++size) {
        const auto hello = parse_client_hello(std::span(bytes).first(size));
        EXPECT_EQ(hello.status, Status::incomplete) << size;
        EXPECT_EQ(hello.server_name, "") << size;
    }
}

TEST(TlsClientHello, AHelloSplitAcrossRecordsIsReassembled) {
    const auto bytes = hand_hello({extension(0, server_name_data({"split.test"}))}, 3);
    const auto hello = parse_client_hello(bytes);
    EXPECT_EQ(hello.status, Status::complete);
    EXPECT_EQ(hello.server_name, "split.test");
}

TEST(TlsClientHello, PlainTextAndOtherRecordTypesAreNotTls) {
    const std::string request = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
    EXPECT_EQ(parse_client_hello(
                  std::span(reinterpret_cast<const std::uint8_t*>(request.data()), request.size()))
                  .status,
              Status::not_tls);
    EXPECT_EQ(parse_client_hello(Bytes{23, 3, 3, 0, 5, 1, 2, 3, 4, 5}).status, Status::not_tls);
    EXPECT_EQ(parse_client_hello(Bytes{0x80, 0x2e, 1, 3, 1}).status, Status::not_tls);  // SSLv2
    EXPECT_EQ(parse_client_hello(Bytes{22, 9}).status, Status::not_tls);
}

TEST(TlsClientHello, LengthsPointingPastTheirContainerAreMalformed) {
    auto bytes = hand_hello({extension(0, server_name_data({"allowed.test"}))});
    // The server-name list claims more than the extension holds.
    auto broken = bytes;
    const auto at = broken.size() - std::string("allowed.test").size() - 5;
    broken[at] = 0x7f;
    EXPECT_EQ(parse_client_hello(broken).status, Status::malformed);
    // The handshake message is not a ClientHello.
    broken = bytes;
    broken[5] = 2;
    EXPECT_EQ(parse_client_hello(broken).status, Status::malformed);
    // A zero-length record.
    EXPECT_EQ(parse_client_hello(Bytes{22, 3, 1, 0, 0}).status, Status::malformed);
}

TEST(TlsClientHello, DuplicateOrImplausibleServerNamesAreMalformed) {
    const auto twice = hand_hello(
        {extension(0, server_name_data({"a.test"})), extension(0, server_name_data({"b.test"}))});
    EXPECT_EQ(parse_client_hello(twice).status, Status::malformed);
    const auto two_names = hand_hello({extension(0, server_name_data({"a.test", "b.test"}))});
    EXPECT_EQ(parse_client_hello(two_names).status, Status::malformed);
    const auto nul =
        hand_hello({extension(0, server_name_data({std::string("a.test\0b.test", 13)}))});
    EXPECT_EQ(parse_client_hello(nul).status, Status::malformed);
}

TEST(TlsClientHello, EncryptedClientHelloIsFlagged) {
    const auto hello = parse_client_hello(hand_hello(
        {extension(0, server_name_data({"public.test"})), extension(0xfe0d, Bytes{0, 1, 2})}));
    EXPECT_EQ(hello.status, Status::complete);
    EXPECT_TRUE(hello.encrypted_server_name);
}

TEST(TlsClientHello, GarbageAfterAHandshakeHeaderNeverCrashesOrNamesAHost) {
    std::mt19937 random(4);  // fixed seed: the same bytes every run
    for (int round = 0; round < 2000; ++round) {
        Bytes bytes{22, 3, 1};
        const auto size = static_cast<std::size_t>(random() % 600);
        put16(bytes, size);
        bytes.push_back(1);
        for (std::size_t i = 1; i < size; ++i) {
            bytes.push_back(static_cast<std::uint8_t>(random()));
        }
        const auto hello = parse_client_hello(bytes);
        EXPECT_TRUE(hello.status != Status::complete || hello.server_name.empty()) << round;
    }
}

}  // namespace
}  // namespace maf_sandbox::runtime
