#include "exec_capture.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas::capture {

std::string new_token() {
    return "maf-exec-" + random_hex(16);
}

std::string scratch_dir(const std::string& token) {
    return "/tmp/" + token;
}

std::string stdin_file(const std::string& token) {
    return scratch_dir(token) + ".stdin";
}

std::string capture_command(const std::string& token, const std::string& user_command,
                            std::uint64_t limit, bool had_stdin) {
    const auto d = shell_quote(scratch_dir(token));
    const auto input = had_stdin ? shell_quote(stdin_file(token)) : std::string("/dev/null");
    const auto remove_stdin =
        had_stdin ? fmt::format("rm -f -- {}; ", shell_quote(stdin_file(token))) : std::string();
    // The readers keep at most limit + 1 bytes (one more than allowed proves an overflow) and
    // drain the rest, so the program never blocks on a full pipe and host memory stays constant.
    // After the manifest, output that fits one answer is printed inline and the scratch removed
    // in this same command. The program's bytes only ever appear as base64, whose alphabet has
    // no '-', so nothing the program writes can forge a token line; `head -c <size>` keeps the
    // readback at the manifest's sizes even if something appends to the files meanwhile, and an
    // empty stream spawns nothing. A failed removal reports only its status, on the last line:
    // its messages must not spoil the answer's empty stderr.
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
        "so=$(wc -c < \"$d/stdout\"); se=$(wc -c < \"$d/stderr\"); so=$((so)); se=$((se))\n"
        "printf '%s %s %s %s\\n' {token} \"$rc\" \"$so\" \"$se\"\n"
        "test $((so + se)) -le {inline} || exit 0\n"
        "test ! -L \"$d\" && cd -P -- \"$d\" && test -f stdout && test ! -L stdout && "
        "test -f stderr && test ! -L stderr || exit 1\n"
        "printf '%s\\n' {token}; test \"$so\" -eq 0 || head -c \"$so\" stdout | base64\n"
        "printf '\\n%s\\n' {token}; test \"$se\" -eq 0 || head -c \"$se\" stderr | base64\n"
        "{{ {remove_stdin}rm -f -- stdout stderr outpipe errpipe && cd / && rmdir -- \"$d\"; }} "
        "2>/dev/null\n"
        "c=$?\n"
        "printf '\\n%s %s\\n' {token} \"$c\"\n",
        fmt::arg("d", d), fmt::arg("n", limit + 1), fmt::arg("cmd", shell_quote(user_command)),
        fmt::arg("input", input), fmt::arg("token", token), fmt::arg("inline", kInlineBytes),
        fmt::arg("remove_stdin", remove_stdin));
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

bool fits_inline(const Manifest& manifest) {
    return manifest.stdout_size <= kInlineBytes &&
           manifest.stderr_size <= kInlineBytes - manifest.stdout_size;
}

namespace {

std::optional<std::string> decode(std::string_view body) {
    try {
        return base64_decode(body);
    } catch (const InvalidArgument&) {
        return std::nullopt;
    }
}

}  // namespace

std::optional<Capture> parse_capture(const std::string& token, const std::string& text) {
    const auto end_of_manifest = text.find('\n');
    if (end_of_manifest == std::string::npos || end_of_manifest >= kManifestMaxBytes)
        return std::nullopt;
    auto manifest = parse_manifest(token, text.substr(0, end_of_manifest + 1));
    if (!manifest)
        return std::nullopt;
    const std::string_view rest = std::string_view(text).substr(end_of_manifest + 1);
    if (!fits_inline(*manifest)) {
        if (!rest.empty())
            return std::nullopt;
        return Capture{*manifest, std::nullopt};
    }
    // "<token>\n" out "\n<token>\n" err "\n<token> <digits>\n"
    const std::string head = token + "\n";
    const std::string middle = "\n" + token + "\n";
    const std::string tail = "\n" + token + " ";
    if (rest.substr(0, head.size()) != head)
        return std::nullopt;
    const auto out_end = rest.find(middle, token.size());
    if (out_end == std::string_view::npos)
        return std::nullopt;
    const auto err_begin = out_end + middle.size();
    const auto err_end = rest.find(tail, err_begin);
    if (err_end == std::string_view::npos)
        return std::nullopt;
    const auto status = rest.substr(err_end + tail.size());
    if (status.size() < 2 || status.size() > 4 || status.back() != '\n')
        return std::nullopt;
    const auto digits = status.substr(0, status.size() - 1);
    if (digits.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    auto out = decode(rest.substr(head.size(), out_end - head.size()));
    auto err = decode(rest.substr(err_begin, err_end - err_begin));
    if (!out || !err || out->size() != manifest->stdout_size ||
        err->size() != manifest->stderr_size) {
        return std::nullopt;
    }
    return Capture{*manifest,
                   Inline{std::move(*out), std::move(*err), std::stoi(std::string(digits))}};
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
        command = fmt::format("rm -f -- {}; {}", shell_quote(stdin_file(token)), command);
    }
    return command;
}

}  // namespace maf_sandbox::acas::capture
