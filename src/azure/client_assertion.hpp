// The signed JWT a client-certificate credential presents as its client assertion.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace maf_sandbox::azure::detail {

std::string base64url(std::string_view bytes);

class CertificateSigner {
  public:
    // Reads a PEM file holding an RSA private key and its certificate. Throws InvalidArgument
    // naming the file when either is missing or the key is not RSA.
    static CertificateSigner from_pem_file(const std::string& path);
    static CertificateSigner from_pem(std::string_view pem, std::string_view origin);

    // header {"alg":"RS256","typ":"JWT","x5t":<SHA-1 thumbprint>} and claims aud, iss = sub =
    // client id, a random jti, nbf now, exp in ten minutes; RS256 signature.
    std::string assertion(std::string_view client_id, std::string_view audience) const;

    const std::string& thumbprint() const noexcept { return thumbprint_; }

  private:
    struct Key;
    std::shared_ptr<Key> key_;
    std::string thumbprint_;  // base64url SHA-1 of the DER certificate
};

}  // namespace maf_sandbox::azure::detail
