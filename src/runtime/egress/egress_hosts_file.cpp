#include "egress_hosts_file.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "egress_host_names.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {

EgressHostsFile EgressHostsFile::load(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) {
        throw SystemError(errno, fmt::format("reading the egress hosts file {}", path.string()),
                          "fix MAF_SANDBOX_EGRESS_HOSTS_FILE or create the file");
    }
    std::ostringstream text;
    text << in.rdbuf();
    return parse(text.str());
}

EgressHostsFile EgressHostsFile::parse(std::string_view text) {
    EgressHostsFile hosts;
    std::istringstream lines{std::string(text)};
    std::string line;
    while (std::getline(lines, line)) {
        if (const auto hash = line.find('#'); hash != std::string::npos) {
            line.resize(hash);
        }
        std::istringstream words(line);
        std::string address_text;
        if (!(words >> address_text)) {
            continue;
        }
        boost::system::error_code error;
        const auto address = boost::asio::ip::make_address(address_text, error);
        if (error) {
            continue;
        }
        std::string name;
        while (words >> name) {
            if (auto normalized = normalize_host_name(name)) {
                hosts.names_[*normalized].push_back(address);
            }
        }
    }
    return hosts;
}

const std::vector<boost::asio::ip::address>& EgressHostsFile::lookup(
    const std::string& host) const {
    static const std::vector<boost::asio::ip::address> kNone;
    const auto found = names_.find(host);
    return found == names_.end() ? kNone : found->second;
}

}  // namespace maf_sandbox::runtime
