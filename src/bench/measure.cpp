// Samples, percentiles and baseline processes for the bench (measure.hpp).
#include "measure.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::bench {

namespace json = boost::json;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Stats stats_of(std::vector<double> samples) {
    Stats s;
    s.n = samples.size();
    if (samples.empty()) {
        return s;
    }
    std::sort(samples.begin(), samples.end());
    const auto rank = [&](double q) {
        const auto index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.n))) - 1;
        return samples[std::min(index, s.n - 1)];
    };
    s.p50 = rank(0.50);
    s.p95 = rank(0.95);
    s.p99 = rank(0.99);
    s.min = samples.front();
    s.max = samples.back();
    double sum = 0;
    for (const double v : samples) {
        sum += v;
    }
    s.mean = sum / static_cast<double>(s.n);
    return s;
}

json::object to_json(const Stats& s) {
    return json::object{{"n", s.n},        {"p50_ms", s.p50},   {"p95_ms", s.p95},
                        {"p99_ms", s.p99}, {"mean_ms", s.mean}, {"min_ms", s.min},
                        {"max_ms", s.max}};
}

Spawned spawn_and_wait(const std::vector<std::string>& argv, char** envp, bool capture,
                       const char* stderr_file) {
    std::vector<char*> args;
    for (const auto& arg : argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    int out[2] = {-1, -1};
    if (capture) {
        if (::pipe2(out, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating a pipe for the benchmark");
        }
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    }
    if (stderr_file != nullptr) {
        posix_spawn_file_actions_addopen(&actions, 2, stderr_file, O_WRONLY | O_CREAT | O_TRUNC,
                                         0600);
    } else {
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    }
    // Never the bench's own stdin: the front ends forward a stdin that is not a terminal, and an
    // open pipe the bench inherited would hold them until it closes.
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = 0;
    const auto started = Clock::now();
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp);
    posix_spawn_file_actions_destroy(&actions);
    Spawned result;
    if (capture) {
        ::close(out[1]);
    }
    if (rc != 0) {
        if (capture) {
            ::close(out[0]);
        }
        throw SystemError(rc, fmt::format("starting {}", argv[0]));
    }
    if (capture) {
        char buffer[65536];
        ssize_t n = 0;
        while ((n = ::read(out[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
            if (n > 0 && result.first_byte_ms < 0) {
                result.first_byte_ms = ms_since(started);
            }
            result.stdout_bytes += n > 0 ? static_cast<std::uint64_t>(n) : 0;
        }
        ::close(out[0]);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

std::optional<std::string> find_program(const std::string& name) {
    for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
        const auto path = fmt::format("{}/{}", dir, name);
        if (::access(path.c_str(), X_OK) == 0) {
            return path;
        }
    }
    return std::nullopt;
}

std::uint64_t fnv1a(std::string_view bytes) {
    std::uint64_t hash = 1469598103934665603ull;
    for (const unsigned char c : bytes) {
        hash = (hash ^ c) * 1099511628211ull;
    }
    return hash;
}

std::string random_bytes(std::size_t size, std::uint32_t seed) {
    std::string out(size, '\0');
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i + 8 <= size; i += 8) {
        const auto word = rng();
        std::memcpy(out.data() + i, &word, 8);
    }
    for (std::size_t i = size - size % 8; i < size; ++i) {
        out[i] = static_cast<char>(rng());
    }
    return out;
}

}  // namespace maf_sandbox::bench
