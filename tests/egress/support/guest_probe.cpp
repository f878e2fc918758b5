// egress-guest-probe: the guest side of the bypass battery, copied into the sandbox and run there.
// Each subcommand makes one attempt and reports it as `key=value` lines on stdout; anything a
// server sent back follows as lines prefixed with "| ". The exit code is 0 whatever the outcome
// (2 for a usage error), so the test reads the outcome, not the status.
//
//   tcp ADDR PORT                       connect directly (IPv4 or IPv6 literal)
//   udp ADDR PORT                       send one datagram, wait for a reply
//   dns-udp ADDR PORT NAME TYPE         one DNS query (TYPE A, AAAA or TXT) over UDP
//   dns-tcp ADDR PORT NAME TYPE         the same over TCP
//   unix PATH | unix-abstract NAME      connect to a unix socket
//   raw ADDR PORT PAYLOAD               connect, send PAYLOAD (\r \n \\ \xHH escapes), print reply
//   tunnel-raw TARGET PAYLOAD           CONNECT TARGET through the proxy, then send PAYLOAD
//   tunnel-tls TARGET SNI HOST PATH     CONNECT TARGET, TLS with SNI ("-" sends none), GET PATH
//                                       with that Host header (no certificate check: the test
//                                       reads who answered, it is not trusting anyone)
//   flood ADDR PORT COUNT PAYLOAD       COUNT connections one after another, each sending PAYLOAD
//                                       and reading the reply head; reports how many were
//                                       answered 403 (`refused=`) and the seconds it took
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char* kProxyAddress = "127.0.0.1";
constexpr std::uint16_t kProxyPort = 3128;
constexpr int kConnectTimeoutMs = 3000;
constexpr int kReplyTimeoutMs = 6000;
constexpr int kDatagramTimeoutMs = 1500;
constexpr std::size_t kMaxReply = 64 * 1024;

void report(const std::string& key, const std::string& value) {
    std::printf("%s=%s\n", key.c_str(), value.c_str());
}

void report_errno(const char* outcome, int error) {
    report("outcome", outcome);
    report("error", std::strerror(error));
}

void print_reply(const std::string& reply) {
    std::size_t start = 0;
    while (start < reply.size()) {
        std::size_t end = reply.find('\n', start);
        if (end == std::string::npos) {
            end = reply.size();
        }
        std::string line = reply.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        std::printf("| %s\n", line.c_str());
        start = end + 1;
    }
}

std::string unescape(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\' || i + 1 == text.size()) {
            out += text[i];
            continue;
        }
        const char next = text[++i];
        if (next == 'r') {
            out += '\r';
        } else if (next == 'n') {
            out += '\n';
        } else if (next == 'x' && i + 2 < text.size()) {
            out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
            i += 2;
        } else {
            out += next;
        }
    }
    return out;
}

// Fills `storage` from an IPv4 or IPv6 literal; false when it is neither.
bool parse_address(const std::string& address, std::uint16_t port, sockaddr_storage& storage,
                   socklen_t& size) {
    storage = {};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        size = sizeof(sockaddr_in);
        return true;
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        size = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

// Connects with a deadline; returns the fd or -1 with errno set.
int connect_with_timeout(const sockaddr* addr, socklen_t size, int type = SOCK_STREAM) {
    const int fd = ::socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    if (::connect(fd, addr, size) != 0) {
        if (errno != EINPROGRESS) {
            const int error = errno;
            ::close(fd);
            errno = error;
            return -1;
        }
        pollfd pfd{fd, POLLOUT, 0};
        if (::poll(&pfd, 1, kConnectTimeoutMs) != 1) {
            ::close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) {
            ::close(fd);
            errno = error;
            return -1;
        }
    }
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

int connect_tcp(const std::string& address, std::uint16_t port) {
    sockaddr_storage storage{};
    socklen_t size = 0;
    if (!parse_address(address, port, storage, size)) {
        errno = EINVAL;
        return -1;
    }
    return connect_with_timeout(reinterpret_cast<sockaddr*>(&storage), size);
}

bool send_all(int fd, const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            return false;
        }
        sent += static_cast<std::size_t>(n);
    }
    return true;
}

// Reads until the peer closes, the deadline passes or `stop` says the reply is complete.
std::string read_reply(int fd, bool (*stop)(const std::string&) = nullptr) {
    std::string reply;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
    char buffer[4096];
    while (reply.size() < kMaxReply) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) {
            report("read", "deadline");
            break;
        }
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, static_cast<int>(left)) != 1) {
            continue;
        }
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
            report("read", n == 0 ? "closed" : std::strerror(errno));
            break;
        }
        reply.append(buffer, static_cast<std::size_t>(n));
        if (stop != nullptr && stop(reply)) {
            break;
        }
    }
    return reply;
}

bool head_complete(const std::string& reply) {
    return reply.find("\r\n\r\n") != std::string::npos;
}

std::string dns_query(const std::string& name, const std::string& type) {
    std::mt19937 random(static_cast<unsigned>(::getpid()));
    std::string query;
    const auto id = static_cast<std::uint16_t>(random());
    query += static_cast<char>(id >> 8);
    query += static_cast<char>(id & 0xff);
    query += std::string("\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10);  // RD, one question
    std::size_t start = 0;
    while (start < name.size()) {
        std::size_t dot = name.find('.', start);
        if (dot == std::string::npos) {
            dot = name.size();
        }
        query += static_cast<char>(dot - start);
        query += name.substr(start, dot - start);
        start = dot + 1;
    }
    query += '\0';
    const std::uint16_t qtype = type == "TXT" ? 16 : type == "AAAA" ? 28 : 1;
    query += static_cast<char>(qtype >> 8);
    query += static_cast<char>(qtype & 0xff);
    query += std::string("\x00\x01", 2);  // class IN
    return query;
}

int datagram(const std::string& address, std::uint16_t port, const std::string& payload) {
    sockaddr_storage storage{};
    socklen_t size = 0;
    if (!parse_address(address, port, storage, size)) {
        report_errno("refused", EINVAL);
        return 0;
    }
    const int fd = ::socket(storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        report_errno("refused", errno);
        return 0;
    }
    if (::sendto(fd, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&storage),
                 size) < 0) {
        report_errno("refused", errno);
        ::close(fd);
        return 0;
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, kDatagramTimeoutMs) == 1) {
        char buffer[2048];
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n >= 0) {
            report("outcome", "answered");
        } else {
            report_errno("refused", errno);  // an ICMP error surfaces here
        }
    } else {
        report("outcome", "no-answer");
    }
    ::close(fd);
    return 0;
}

int tcp_exchange(const std::string& address, std::uint16_t port, const std::string& payload) {
    const int fd = connect_tcp(address, port);
    if (fd < 0) {
        report_errno("refused", errno);
        return 0;
    }
    report("outcome", "connected");
    if (!payload.empty()) {
        send_all(fd, payload);
        print_reply(read_reply(fd));
    }
    ::close(fd);
    return 0;
}

int unix_connect(const std::string& name, bool abstract) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::size_t offset = abstract ? 1 : 0;
    if (name.size() + offset >= sizeof addr.sun_path) {
        report_errno("refused", ENAMETOOLONG);
        return 0;
    }
    std::memcpy(addr.sun_path + offset, name.data(), name.size());
    const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset +
                                             name.size() + (abstract ? 0 : 1));
    const int fd = connect_with_timeout(reinterpret_cast<sockaddr*>(&addr), size);
    if (fd < 0) {
        report_errno("refused", errno);
        return 0;
    }
    report("outcome", "connected");
    ::close(fd);
    return 0;
}

// Sends CONNECT for `target` through the proxy; returns the fd when the proxy said 2xx, else -1
// after reporting what it said.
int open_tunnel(const std::string& target) {
    const int fd = connect_tcp(kProxyAddress, kProxyPort);
    if (fd < 0) {
        report_errno("proxy-unreachable", errno);
        return -1;
    }
    send_all(fd, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
    const std::string head = read_reply(fd, head_complete);
    const std::string status = head.size() >= 12 ? head.substr(9, 3) : "none";
    report("connect-status", status);
    if (status.empty() || status[0] != '2') {
        report("outcome", "tunnel-refused");
        print_reply(head);
        ::close(fd);
        return -1;
    }
    return fd;
}

int tunnel_raw(const std::string& target, const std::string& payload) {
    const int fd = open_tunnel(target);
    if (fd < 0) {
        return 0;
    }
    report("outcome", "tunnel-open");
    send_all(fd, payload);
    print_reply(read_reply(fd));
    ::close(fd);
    return 0;
}

int tunnel_tls(const std::string& target, const std::string& sni, const std::string& host,
               const std::string& path) {
    const int fd = open_tunnel(target);
    if (fd < 0) {
        return 0;
    }
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (sni != "-") {
        SSL_set_tlsext_host_name(ssl, sni.c_str());
    }
    timeval timeout{kReplyTimeoutMs / 1000, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (SSL_connect(ssl) != 1) {
        report("outcome", "tls-failed");
    } else {
        report("outcome", "tls-ok");
        const std::string request =
            "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
        SSL_write(ssl, request.data(), static_cast<int>(request.size()));
        std::string reply;
        char buffer[4096];
        int n = 0;
        while (reply.size() < kMaxReply && (n = SSL_read(ssl, buffer, sizeof buffer)) > 0) {
            reply.append(buffer, static_cast<std::size_t>(n));
        }
        print_reply(reply);
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ::close(fd);
    return 0;
}

std::uint16_t port_of(const char* text) {
    return static_cast<std::uint16_t>(std::stoi(text));
}

int usage() {
    std::fprintf(stderr,
                 "usage: egress-guest-probe tcp|udp|dns-udp|dns-tcp|unix|unix-abstract|"
                 "raw|tunnel-raw|tunnel-tls|flood ARGS...\n");
    return 2;
}

}  // namespace

int flood(const std::string& address, std::uint16_t port, long count, const std::string& payload) {
    long refused = 0;
    long failed = 0;
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < count; ++i) {
        const int fd = connect_tcp(address, port);
        if (fd < 0) {
            ++failed;
            continue;
        }
        if (send_all(fd, payload)) {
            ::shutdown(fd, SHUT_WR);  // lets the proxy's linger after a refusal end at once
            std::string reply;
            char buffer[1024];
            pollfd pfd{fd, POLLIN, 0};
            while (!head_complete(reply) && ::poll(&pfd, 1, kReplyTimeoutMs) == 1) {
                const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
                if (n <= 0) {
                    break;
                }
                reply.append(buffer, static_cast<std::size_t>(n));
            }
            refused += reply.starts_with("HTTP/1.1 403") ? 1 : 0;
        }
        ::close(fd);
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    report("refused", std::to_string(refused));
    report("failed", std::to_string(failed));
    report("seconds", std::to_string(took.count()));
    return 0;
}

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 2) {
        return usage();
    }
    const std::string command = argv[1];
    const std::vector<std::string> args(argv + 2, argv + argc);
    if (command == "tcp" && args.size() == 2) {
        return tcp_exchange(args[0], port_of(argv[3]), "");
    }
    if (command == "raw" && args.size() == 3) {
        return tcp_exchange(args[0], port_of(argv[3]), unescape(args[2]));
    }
    if (command == "udp" && args.size() == 2) {
        return datagram(args[0], port_of(argv[3]), "maf-egress-probe");
    }
    if (command == "dns-udp" && args.size() == 4) {
        return datagram(args[0], port_of(argv[3]), dns_query(args[2], args[3]));
    }
    if (command == "dns-tcp" && args.size() == 4) {
        const std::string query = dns_query(args[2], args[3]);
        std::string framed;
        framed += static_cast<char>(query.size() >> 8);
        framed += static_cast<char>(query.size() & 0xff);
        return tcp_exchange(args[0], port_of(argv[3]), framed + query);
    }
    if (command == "unix" && args.size() == 1) {
        return unix_connect(args[0], false);
    }
    if (command == "unix-abstract" && args.size() == 1) {
        return unix_connect(args[0], true);
    }
    if (command == "tunnel-raw" && args.size() == 2) {
        return tunnel_raw(args[0], unescape(args[1]));
    }
    if (command == "flood" && args.size() == 4) {
        return flood(args[0], port_of(argv[3]), std::stol(args[2]), unescape(args[3]));
    }
    if (command == "tunnel-tls" && args.size() == 4) {
        return tunnel_tls(args[0], args[1], args[2], args[3]);
    }
    return usage();
}
