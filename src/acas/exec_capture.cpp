#include "exec_capture.hpp"

#include <openssl/rand.h>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas::capture {

std::string new_token() {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
        throw Error("the host's random number generator failed; retry the command");
    }
    std::string token = "maf-exec-";
    for (unsigned char b : bytes)
        token += fmt::format("{:02x}", b);
    return token;
}

std::string scratch_dir(const std::string& token) {
    return "/tmp/" + token;
}

std::string capture_command(const std::string& token, const std::string& user_command,
                            std::uint64_t limit, const std::optional<std::string>& stdin_path) {
    const auto d = shell_quote(scratch_dir(token));
    const auto input = stdin_path ? shell_quote(*stdin_path) : std::string("/dev/null");
    // The readers keep at most limit + 1 bytes (one more than allowed proves an overflow) and
    // drain the rest, so the program never blocks on a full pipe and host memory stays constant.
    return fmt::format(
        "for t in sh mkdir mkfifo head cat wc dd base64 rm rmdir; do "
        "command -v \"$t\" >/dev/null 2>&1 || exit 127; done\n"
        "d={d}\n"
        "o=$(umask); umask 077\n"
        "mkdir -m 700 \"$d\" || exit 125\n"
        "mkfifo \"$d/outpipe\" \"$d/errpipe\" || exit 125\n"
        "{{ head -c {n} > \"$d/stdout\"; cat > /dev/null; }} < \"$d/outpipe\" &\n"
        "r1=$!\n"
        "{{ head -c {n} > \"$d/stderr\"; cat > /dev/null; }} < \"$d/errpipe\" &\n"
        "r2=$!\n"
        "( umask \"$o\"; exec sh -c {cmd} ) > \"$d/outpipe\" 2> \"$d/errpipe\" < {input}\n"
        "rc=$?\n"
        "wait \"$r1\"; wait \"$r2\"\n"
        "so=$(wc -c < \"$d/stdout\"); se=$(wc -c < \"$d/stderr\")\n"
        "printf '%s %s %s %s\\n' {token} \"$rc\" $((so)) $((se))\n",
        fmt::arg("d", d), fmt::arg("n", limit + 1), fmt::arg("cmd", shell_quote(user_command)),
        fmt::arg("input", input), fmt::arg("token", token));
}

std::optional<Manifest> parse_manifest(const std::string& token, const std::string& text) {
    if (text.size() > kManifestMaxBytes || text.empty() || text.back() != '\n')
        return std::nullopt;
    const std::string line = text.substr(0, text.size() - 1);
    if (line.find('\n') != std::string::npos)
        return std::nullopt;
    std::vector<std::string> fields;
    std::size_t start = 0;
    while (start <= line.size()) {
        const auto space = line.find(' ', start);
        fields.push_back(
            line.substr(start, space == std::string::npos ? std::string::npos : space - start));
        if (space == std::string::npos)
            break;
        start = space + 1;
    }
    if (fields.size() != 4 || fields[0] != token)
        return std::nullopt;
    std::uint64_t numbers[3];
    for (int i = 0; i < 3; ++i) {
        const auto& f = fields[static_cast<std::size_t>(i + 1)];
        if (f.empty() || f.size() > 19 || f.find_first_not_of("0123456789") != std::string::npos) {
            return std::nullopt;
        }
        numbers[i] = std::stoull(f);
    }
    if (numbers[0] > 255)
        return std::nullopt;
    return Manifest{static_cast<int>(numbers[0]), numbers[1], numbers[2]};
}

std::string retrieval_command(const std::string& token, const std::string& stream,
                              std::uint64_t chunk) {
    return fmt::format(
        "d={d}; test ! -L \"$d\" && cd -P -- \"$d\" && test -f {s} && test ! -L {s} || exit 1\n"
        "printf '%s\\n' {t}; dd if={s} bs={bs} skip={k} count=1 2>/dev/null | base64; "
        "printf '\\n%s\\n' {t}\n",
        fmt::arg("d", shell_quote(scratch_dir(token))), fmt::arg("s", shell_quote(stream)),
        fmt::arg("t", token), fmt::arg("bs", kChunkBytes), fmt::arg("k", chunk));
}

std::optional<std::string> parse_retrieval(const std::string& token, const std::string& text) {
    const std::string head = token + "\n";
    const std::string tail = "\n" + token + "\n";
    if (text.size() < head.size() + tail.size() || text.compare(0, head.size(), head) != 0 ||
        text.compare(text.size() - tail.size(), tail.size(), tail) != 0) {
        return std::nullopt;
    }
    const auto body = text.substr(head.size(), text.size() - head.size() - tail.size());
    try {
        return base64_decode(body);
    } catch (const InvalidArgument&) {
        return std::nullopt;
    }
}

std::string cleanup_command(const std::string& token, bool had_stdin) {
    const auto d = shell_quote(scratch_dir(token));
    std::string command = fmt::format(
        "d={d}; test ! -L \"$d\" && cd -P -- \"$d\" && rm -f -- stdout stderr outpipe errpipe && "
        "cd / && rmdir -- \"$d\"",
        fmt::arg("d", d));
    if (had_stdin) {
        command =
            fmt::format("rm -f -- {}; {}", shell_quote(scratch_dir(token) + ".stdin"), command);
    }
    return command;
}

}  // namespace maf_sandbox::acas::capture
