// Reading the server name (SNI) out of a TLS ClientHello, as the egress proxy sees the first bytes
// of a CONNECT tunnel. Never trusts a length: every field is bounds-checked against what arrived.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace maf_sandbox::runtime {

// The most bytes worth buffering for one ClientHello (its handshake message may span several
// records; real ones are under 2 KiB, post-quantum key shares included).
inline constexpr std::size_t kMaxClientHelloBytes = 64 * 1024;

struct ClientHello {
    enum class Status {
        incomplete,  // a valid prefix: read more bytes and parse again
        not_tls,     // the first bytes are not a TLS handshake record
        malformed,   // a TLS handshake record, but not a well-formed ClientHello
        complete,    // a whole ClientHello: server_name below is what it names
    };
    Status status = Status::incomplete;
    // The host_name entry of the server_name extension as sent (empty when there is none).
    std::string server_name;
    // The hello carries encrypted_client_hello (or the draft ESNI extension): its real server
    // name is hidden, so a proxy that checks SNI must refuse it.
    bool encrypted_server_name = false;
};

// Parses the ClientHello at the start of `bytes` (a prefix of the tunnel's first bytes).
// `malformed` when a length points past its container, an SNI entry is not a plausible host name,
// a second server_name extension or host_name entry appears, or the hello is over
// kMaxClientHelloBytes.
ClientHello parse_client_hello(std::span<const std::uint8_t> bytes);

}  // namespace maf_sandbox::runtime
