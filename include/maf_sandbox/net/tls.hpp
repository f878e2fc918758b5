// TLS material for HttpServer and for tests: loading a certificate and key, and minting a local
// CA with a server certificate for 127.0.0.1 and localhost (OpenSSL 3, EVP only).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace maf_sandbox::net {

struct PemCredentials {
    std::string certificate_chain_pem;  // leaf first
    std::string private_key_pem;
};

// Reads both PEM files. Throws InvalidArgument naming the file when one is missing, unreadable or
// not PEM.
PemCredentials load_pem_files(const std::filesystem::path& certificate,
                              const std::filesystem::path& private_key);

struct SelfSignedAuthority {
    std::string ca_certificate_pem;  // what a client trusts (ca.pem)
    PemCredentials server;           // chain = server certificate + CA certificate
};

// A fresh P-256 CA (10 years) and a server certificate it signs (2 years) whose subjectAltName
// lists `dns_names` and `ip_addresses`. Throws Error when OpenSSL refuses.
SelfSignedAuthority generate_self_signed(const std::vector<std::string>& dns_names = {"localhost"},
                                         const std::vector<std::string>& ip_addresses = {
                                             "127.0.0.1"});

// Writes `content` to `path` through a sibling temporary file, fsync and rename, with `mode`.
// Throws SystemError.
void write_file_atomically(const std::filesystem::path& path, const std::string& content,
                           unsigned mode = 0644);

}  // namespace maf_sandbox::net
