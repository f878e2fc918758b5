// The egress proxy against a direct connection, in one run (issue 4's benchmark): the added
// latency of one small GET forwarded through the proxy, and the throughput of a 100 MiB download
// through a CONNECT tunnel. The upstreams are the benchmark's own loopback servers, named in an
// operator hosts file; the proxy runs in a thread exactly as the supervisor runs it in a process.
//
// The download server reads the client's first flight (a real OpenSSL ClientHello whose SNI names
// the CONNECT host, which the proxy checks) and then streams 100 MiB of plain bytes, so what is
// measured is the relay, not a cipher.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace {

using maf_sandbox::runtime::UniqueFd;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kDownloadBytes = 100u << 20;
constexpr std::size_t kWriteChunk = 1u << 20;

UniqueFd listen_on_loopback(std::uint16_t& port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd.get(), 128) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        throw std::runtime_error("cannot listen on loopback");
    }
    port = ntohs(address.sin_port);
    return fd;
}

UniqueFd connect_to(std::uint16_t port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        throw std::runtime_error("connect failed");
    }
    return fd;
}

void send_all(int fd, const void* data, std::size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    while (size > 0) {
        const auto n = ::send(fd, bytes, size, MSG_NOSIGNAL);
        if (n <= 0) {
            throw std::runtime_error("send failed");
        }
        bytes += n;
        size -= static_cast<std::size_t>(n);
    }
}

void send_all(int fd, const std::string& text) {
    send_all(fd, text.data(), text.size());
}

// Reads until EOF; returns the byte count.
std::size_t drain(int fd) {
    std::vector<char> buffer(1u << 20);
    std::size_t total = 0;
    while (true) {
        const auto n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            return total;
        }
        total += static_cast<std::size_t>(n);
    }
}

std::string read_head(int fd) {
    std::string out;
    char c = 0;
    while (out.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) {
        out += c;
    }
    return out;
}

std::string client_hello(const char* server_name) {
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                              SSL_CTX_free);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), SSL_free);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);
    SSL_set_tlsext_host_name(ssl.get(), server_name);
    SSL_connect(ssl.get());
    std::string hello(static_cast<std::size_t>(BIO_ctrl_pending(out)), '\0');
    BIO_read(out, hello.data(), static_cast<int>(hello.size()));
    return hello;
}

// A loopback server that handles one connection at a time on its own thread.
class Server {
  public:
    explicit Server(std::function<void(int)> handle) : handle_(std::move(handle)) {
        listener_ = listen_on_loopback(port_);
        thread_ = std::thread([this] {
            while (true) {
                UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
                if (!client) {
                    return;  // shut down
                }
                handle_(client.get());
            }
        });
    }
    ~Server() {
        ::shutdown(listener_.get(), SHUT_RDWR);
        thread_.join();
    }
    std::uint16_t port() const { return port_; }

  private:
    std::function<void(int)> handle_;
    UniqueFd listener_;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

void serve_small(int fd) {
    read_head(fd);
    send_all(fd,
             std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"));
}

void serve_download(int fd) {
    char first[4096];
    if (::recv(fd, first, sizeof first, 0) <= 0) {
        return;
    }
    static const std::vector<char> zeros(kWriteChunk, 0);
    for (std::size_t sent = 0; sent < kDownloadBytes; sent += kWriteChunk) {
        send_all(fd, zeros.data(), zeros.size());
    }
}

// The servers, the proxy thread and the measured means, for the benchmark process's lifetime.
struct Bench {
    std::filesystem::path dir;
    Server small{serve_small};
    Server download{serve_download};
    std::uint16_t proxy_port = 0;
    UniqueFd lifetime_write;
    std::thread proxy;
    std::string hello = client_hello("bench.test");
    std::map<std::string, double> seconds;  // mean wall time per iteration, by benchmark

    Bench() {
        std::string pattern = "/tmp/maf-egress-bench-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        dir = pattern;
        std::ofstream(dir / "hosts") << "127.0.0.1 bench.test\n";
        maf_sandbox::runtime::EgressProxyOptions options;
        options.rules = maf_sandbox::runtime::compile_allowlist(
            {"bench.test:" + std::to_string(small.port()),
             "bench.test:" + std::to_string(download.port())});
        options.operator_options.hosts_file = dir / "hosts";
        options.operator_options.allow_private = true;
        options.decision_log = dir / "decisions.jsonl";
        auto listener = listen_on_loopback(proxy_port);
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            throw std::runtime_error("pipe2 failed");
        }
        lifetime_write.reset(fds[1]);
        proxy = std::thread([options, listener = listener.release(), lifetime = fds[0]] {
            maf_sandbox::runtime::run_egress_proxy(listener, lifetime, options);
            ::close(lifetime);
        });
    }
    ~Bench() {
        lifetime_write.reset();
        proxy.join();
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
};

Bench& bench() {
    static Bench instance;  // benchmark-process lifetime only
    return instance;
}

template <typename Body>
void measure(benchmark::State& state, const char* name, Body body) {
    auto& b = bench();
    std::size_t bytes = 0;
    const auto start = Clock::now();
    for (auto _ : state) {
        bytes += body(b);
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    b.seconds[name] = elapsed.count() / static_cast<double>(state.iterations());
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

void BM_SmallGetDirect(benchmark::State& state) {
    measure(state, "get_direct", [](Bench& b) {
        auto fd = connect_to(b.small.port());
        send_all(fd.get(), "GET / HTTP/1.1\r\nHost: bench.test:" + std::to_string(b.small.port()) +
                               "\r\n\r\n");
        return drain(fd.get());
    });
}

void BM_SmallGetViaProxy(benchmark::State& state) {
    measure(state, "get_proxy", [](Bench& b) {
        const auto authority = "bench.test:" + std::to_string(b.small.port());
        auto fd = connect_to(b.proxy_port);
        send_all(fd.get(),
                 "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\n\r\n");
        return drain(fd.get());
    });
}

void BM_Download100MiBDirect(benchmark::State& state) {
    measure(state, "download_direct", [](Bench& b) {
        auto fd = connect_to(b.download.port());
        send_all(fd.get(), b.hello);
        return drain(fd.get());
    });
}

void BM_Download100MiBViaConnect(benchmark::State& state) {
    measure(state, "download_proxy", [](Bench& b) {
        const auto authority = "bench.test:" + std::to_string(b.download.port());
        auto fd = connect_to(b.proxy_port);
        send_all(fd.get(), "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n");
        if (!read_head(fd.get()).starts_with("HTTP/1.1 200")) {
            throw std::runtime_error("the proxy refused the benchmark's CONNECT");
        }
        send_all(fd.get(), b.hello);
        const auto got = drain(fd.get());
        if (got != kDownloadBytes) {
            throw std::runtime_error("the tunnel delivered a short download");
        }
        return got;
    });
}

BENCHMARK(BM_SmallGetDirect)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SmallGetViaProxy)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Download100MiBDirect)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Download100MiBViaConnect)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    const auto& s = bench().seconds;
    if (s.count("get_direct") && s.count("get_proxy")) {
        std::printf("\nsmall GET: direct %.1f us, via proxy %.1f us: added %.1f us (x%.2f)\n",
                    s.at("get_direct") * 1e6, s.at("get_proxy") * 1e6,
                    (s.at("get_proxy") - s.at("get_direct")) * 1e6,
                    s.at("get_proxy") / s.at("get_direct"));
    }
    if (s.count("download_direct") && s.count("download_proxy")) {
        const double mib = static_cast<double>(kDownloadBytes) / (1u << 20);
        std::printf(
            "100 MiB download: direct %.0f MiB/s, via CONNECT %.0f MiB/s (x%.2f of direct)\n",
            mib / s.at("download_direct"), mib / s.at("download_proxy"),
            s.at("download_direct") / s.at("download_proxy"));
    }
    return 0;
}
