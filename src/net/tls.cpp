#include "maf_sandbox/net/tls.hpp"

#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "tls_context.hpp"

namespace maf_sandbox::net {
namespace {

struct BioFree {
    void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
    void operator()(X509* x) const { X509_free(x); }
};
struct ExtFree {
    void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

[[noreturn]] void openssl_failed(const char* doing) {
    throw Error(fmt::format("OpenSSL failed while {}; check the OpenSSL 3 installation", doing));
}

std::string read_text_file(const std::filesystem::path& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InvalidArgument(
            fmt::format("cannot read the {} file {}; check the path and its "
                        "permissions",
                        what, path.string()));
    }
    std::ostringstream buffer;
    buffer << in.rdbuf();
    auto text = buffer.str();
    if (text.find("-----BEGIN ") == std::string::npos) {
        throw InvalidArgument(
            fmt::format("the {} file {} is not PEM; pass a PEM-encoded file", what, path.string()));
    }
    return text;
}

Pkey new_key() {
    Pkey key(EVP_EC_gen("P-256"));
    if (!key) {
        openssl_failed("generating a P-256 key");
    }
    return key;
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    std::unique_ptr<X509_EXTENSION, ExtFree> ext(
        X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
    if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
        openssl_failed("adding a certificate extension");
    }
}

Cert new_cert(EVP_PKEY* key, const std::string& common_name, long days) {
    Cert cert(X509_new());
    if (!cert || X509_set_version(cert.get(), 2) != 1) {
        openssl_failed("creating a certificate");
    }
    unsigned char serial[16];
    fill_random(serial);
    serial[0] &= 0x7f;  // positive
    std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_bin2bn(serial, sizeof serial, nullptr),
                                                   &BN_free);
    if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) == nullptr) {
        openssl_failed("setting a serial number");
    }
    // Backdated an hour so clocks slightly behind still accept it.
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), days * 24 * 3600);
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("maf-sandbox"), -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                               0);
    if (X509_set_pubkey(cert.get(), key) != 1) {
        openssl_failed("setting a public key");
    }
    return cert;
}

std::string pem_of(X509* cert) {
    Bio bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) {
        openssl_failed("encoding a certificate");
    }
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<std::size_t>(size));
}

std::string pem_of(EVP_PKEY* key) {
    Bio bio(BIO_new(BIO_s_mem()));
    if (!bio ||
        PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
        openssl_failed("encoding a private key");
    }
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<std::size_t>(size));
}

}  // namespace

PemCredentials load_pem_files(const std::filesystem::path& certificate,
                              const std::filesystem::path& private_key) {
    return PemCredentials{read_text_file(certificate, "certificate"),
                          read_text_file(private_key, "private key")};
}

SelfSignedAuthority generate_self_signed(const std::vector<std::string>& dns_names,
                                         const std::vector<std::string>& ip_addresses) {
    auto ca_key = new_key();
    auto ca = new_cert(ca_key.get(), "maf-sandbox local CA", 3650);
    X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
    add_ext(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_ext(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
    if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) == 0) {
        openssl_failed("signing the CA certificate");
    }

    auto key = new_key();
    const std::string cn = dns_names.empty()
                               ? (ip_addresses.empty() ? "localhost" : ip_addresses.front())
                               : dns_names.front();
    auto leaf = new_cert(key.get(), cn, 730);
    X509_set_issuer_name(leaf.get(), X509_get_subject_name(ca.get()));
    std::string san;
    for (const auto& name : dns_names) {
        san += (san.empty() ? "" : ",") + std::string("DNS:") + name;
    }
    for (const auto& ip : ip_addresses) {
        san += (san.empty() ? "" : ",") + std::string("IP:") + ip;
    }
    add_ext(leaf.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_ext(leaf.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
    add_ext(leaf.get(), ca.get(), NID_ext_key_usage, "serverAuth");
    if (!san.empty()) {
        add_ext(leaf.get(), ca.get(), NID_subject_alt_name, san);
    }
    add_ext(leaf.get(), ca.get(), NID_subject_key_identifier, "hash");
    add_ext(leaf.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
    if (X509_sign(leaf.get(), ca_key.get(), EVP_sha256()) == 0) {
        openssl_failed("signing the server certificate");
    }

    SelfSignedAuthority out;
    out.ca_certificate_pem = pem_of(ca.get());
    out.server.certificate_chain_pem = pem_of(leaf.get()) + out.ca_certificate_pem;
    out.server.private_key_pem = pem_of(key.get());
    return out;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& content,
                           unsigned mode) {
    const auto temp = path.string() + fmt::format(".tmp-{}", ::getpid());
    const int fd =
        ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd < 0) {
        throw SystemError(errno, fmt::format("creating {}", temp), "check the directory exists");
    }
    std::size_t done = 0;
    while (done < content.size()) {
        const auto n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            const int e = errno;
            ::close(fd);
            ::unlink(temp.c_str());
            throw SystemError(e, fmt::format("writing {}", temp), "check free disk space");
        }
        done += static_cast<std::size_t>(n);
    }
    ::fchmod(fd, static_cast<mode_t>(mode));
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        const int e = errno;
        ::unlink(temp.c_str());
        throw SystemError(e, fmt::format("flushing {}", temp), "check free disk space");
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(temp.c_str());
        throw SystemError(e, fmt::format("renaming {} to {}", temp, path.string()));
    }
    // The rename is durable only once the directory entry is.
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

namespace detail {

boost::asio::ssl::context make_client_context(const std::optional<std::string>& ca_file,
                                              const std::optional<std::string>& ca_pem,
                                              bool use_system_store) {
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    ctx.set_options(boost::asio::ssl::context::default_workarounds |
                    boost::asio::ssl::context::no_sslv2 | boost::asio::ssl::context::no_sslv3 |
                    boost::asio::ssl::context::no_tlsv1 | boost::asio::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    if (use_system_store) {
        ctx.set_default_verify_paths(ec);  // a host without a store still works with a CA file
    }
    if (ca_file) {
        ctx.load_verify_file(*ca_file, ec);
        if (ec) {
            throw InvalidArgument(
                fmt::format("cannot load the CA file {}: {}; pass a readable PEM certificate file",
                            *ca_file, ec.message()));
        }
    }
    if (ca_pem) {
        ctx.add_certificate_authority(boost::asio::buffer(*ca_pem), ec);
        if (ec) {
            throw InvalidArgument(
                fmt::format("cannot load the CA certificate: {}; pass PEM text", ec.message()));
        }
    }
    ctx.set_verify_mode(boost::asio::ssl::verify_peer);
    return ctx;
}

boost::asio::ssl::context make_server_context(const PemCredentials& credentials) {
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_server);
    ctx.set_options(boost::asio::ssl::context::default_workarounds |
                    boost::asio::ssl::context::no_sslv2 | boost::asio::ssl::context::no_sslv3 |
                    boost::asio::ssl::context::no_tlsv1 | boost::asio::ssl::context::no_tlsv1_1 |
                    boost::asio::ssl::context::single_dh_use);
    boost::system::error_code ec;
    ctx.use_certificate_chain(boost::asio::buffer(credentials.certificate_chain_pem), ec);
    if (ec) {
        throw InvalidArgument(fmt::format(
            "the server certificate chain does not load: {}; pass a PEM chain", ec.message()));
    }
    ctx.use_private_key(boost::asio::buffer(credentials.private_key_pem),
                        boost::asio::ssl::context::pem, ec);
    if (ec) {
        throw InvalidArgument(fmt::format(
            "the server private key does not load: {}; pass a PEM key matching the certificate",
            ec.message()));
    }
    return ctx;
}

}  // namespace detail
}  // namespace maf_sandbox::net
