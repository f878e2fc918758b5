// The operator's hosts file for the egress proxy (MAF_SANDBOX_EGRESS_HOSTS_FILE, /etc/hosts
// format), consulted before DNS so tests can name their own hosts without touching /etc/hosts.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::runtime {

class EgressHostsFile {
  public:
    EgressHostsFile() = default;
    // Reads `path`: "ADDRESS NAME [ALIAS...]" per line, '#' starts a comment, lines whose address
    // does not parse are skipped (as the C library does). Throws SystemError when it cannot be
    // read.
    static EgressHostsFile load(const std::filesystem::path& path);
    // Parses hosts-file text.
    static EgressHostsFile parse(std::string_view text);

    // The addresses listed for `host` (a normalized name), in file order; empty when none.
    const std::vector<boost::asio::ip::address>& lookup(const std::string& host) const;

  private:
    std::map<std::string, std::vector<boost::asio::ip::address>, std::less<>> names_;
};

}  // namespace maf_sandbox::runtime
