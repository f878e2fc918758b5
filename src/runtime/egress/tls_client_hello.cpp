#include "tls_client_hello.hpp"

#include <algorithm>
#include <optional>
#include <vector>

namespace maf_sandbox::runtime {
namespace {

using Status = ClientHello::Status;

constexpr std::uint8_t kHandshakeRecord = 22;
constexpr std::uint8_t kClientHelloMessage = 1;
constexpr std::size_t kRecordHeader = 5;
constexpr std::size_t kMaxRecordPayload = (1 << 14) + 2048;  // TLSCiphertext's ceiling
constexpr std::uint16_t kServerNameExtension = 0;
constexpr std::uint16_t kEncryptedClientHello = 0xfe0d;
constexpr std::uint16_t kDraftEncryptedServerName = 0xffce;
constexpr std::uint8_t kHostNameType = 0;
constexpr std::size_t kMaxServerName = 255;

// A bounds-checked cursor: every read either succeeds inside the span or marks the reader failed.
class Reader {
  public:
    explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
    bool failed() const { return failed_; }
    bool empty() const { return bytes_.empty(); }

    std::uint32_t number(std::size_t width) {
        if (failed_ || bytes_.size() < width) {
            failed_ = true;
            return 0;
        }
        std::uint32_t value = 0;
        for (std::size_t i = 0; i < width; ++i) {
            value = (value << 8) | bytes_[i];
        }
        bytes_ = bytes_.subspan(width);
        return value;
    }

    std::span<const std::uint8_t> take(std::size_t count) {
        if (failed_ || bytes_.size() < count) {
            failed_ = true;
            return {};
        }
        auto out = bytes_.first(count);
        bytes_ = bytes_.subspan(count);
        return out;
    }

    // A vector with a `width`-byte length prefix.
    Reader sub(std::size_t width) {
        const auto length = number(width);
        return Reader(take(length), failed_);
    }

  private:
    Reader(std::span<const std::uint8_t> bytes, bool failed) : bytes_(bytes), failed_(failed) {}
    std::span<const std::uint8_t> bytes_;
    bool failed_ = false;
};

bool plausible_host_name(std::span<const std::uint8_t> name) {
    if (name.empty() || name.size() > kMaxServerName) {
        return false;
    }
    for (const auto c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
        if (!ok) {
            return false;
        }
    }
    return true;
}

ClientHello result(Status status) {
    ClientHello hello;
    hello.status = status;
    return hello;
}

// Parses the body of a ClientHello handshake message (after its 4-byte header).
ClientHello parse_body(std::span<const std::uint8_t> body) {
    Reader reader(body);
    reader.take(2);   // legacy_version
    reader.take(32);  // random
    auto session_id = reader.sub(1);
    auto cipher_suites = reader.sub(2);
    auto compression = reader.sub(1);
    (void)session_id;
    (void)compression;
    if (reader.failed() || cipher_suites.failed()) {
        return result(Status::malformed);
    }
    ClientHello hello;
    hello.status = Status::complete;
    if (reader.empty()) {
        return hello;  // no extensions at all (SSL 3.0 style): no server name
    }
    auto extensions = reader.sub(2);
    if (reader.failed() || !reader.empty()) {
        return result(Status::malformed);
    }
    bool seen_server_name = false;
    while (!extensions.empty()) {
        const auto type = static_cast<std::uint16_t>(extensions.number(2));
        auto data = extensions.sub(2);
        if (extensions.failed()) {
            return result(Status::malformed);
        }
        if (type == kEncryptedClientHello || type == kDraftEncryptedServerName) {
            hello.encrypted_server_name = true;
            continue;
        }
        if (type != kServerNameExtension) {
            continue;
        }
        if (seen_server_name) {
            return result(Status::malformed);
        }
        seen_server_name = true;
        auto names = data.sub(2);
        if (data.failed() || !data.empty()) {
            return result(Status::malformed);
        }
        while (!names.empty()) {
            const auto name_type = names.number(1);
            const auto name = names.take(names.number(2));
            if (names.failed()) {
                return result(Status::malformed);
            }
            if (name_type != kHostNameType) {
                continue;
            }
            if (!hello.server_name.empty() || !plausible_host_name(name)) {
                return result(Status::malformed);
            }
            hello.server_name.assign(name.begin(), name.end());
        }
    }
    return hello;
}

}  // namespace

ClientHello parse_client_hello(std::span<const std::uint8_t> bytes) {
    if (bytes.empty()) {
        return result(Status::incomplete);
    }
    if (bytes[0] != kHandshakeRecord) {
        return result(Status::not_tls);
    }
    // Reassemble the handshake message from as many handshake records as it spans.
    std::vector<std::uint8_t> message;
    std::optional<std::size_t> message_size;
    while (true) {
        if (bytes.size() < kRecordHeader) {
            // Judge what arrived of the header so garbage is refused without waiting for more.
            if (bytes[0] != kHandshakeRecord || (bytes.size() >= 2 && bytes[1] != 3)) {
                return result(message.empty() ? Status::not_tls : Status::malformed);
            }
            return result(Status::incomplete);
        }
        if (bytes[0] != kHandshakeRecord) {
            return result(message.empty() ? Status::not_tls : Status::malformed);
        }
        if (bytes[1] != 3 || bytes[2] > 4) {
            return result(message.empty() ? Status::not_tls : Status::malformed);
        }
        const std::size_t length = (std::size_t{bytes[3]} << 8) | bytes[4];
        if (length == 0 || length > kMaxRecordPayload) {
            return result(Status::malformed);
        }
        const auto available = std::min(length, bytes.size() - kRecordHeader);
        const auto payload = bytes.subspan(kRecordHeader, available);
        message.insert(message.end(), payload.begin(), payload.end());
        if (!message_size && message.size() >= 4) {
            if (message[0] != kClientHelloMessage) {
                return result(Status::malformed);
            }
            message_size =
                4 + ((std::size_t{message[1]} << 16) | (std::size_t{message[2]} << 8) | message[3]);
            if (*message_size > kMaxClientHelloBytes) {
                return result(Status::malformed);
            }
        }
        if (message_size && message.size() >= *message_size) {
            return parse_body(std::span(message).subspan(4, *message_size - 4));
        }
        if (available < length) {
            return result(Status::incomplete);
        }
        bytes = bytes.subspan(kRecordHeader + length);
        if (bytes.empty()) {
            return result(Status::incomplete);
        }
    }
}

}  // namespace maf_sandbox::runtime
