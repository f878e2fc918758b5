// The one source of random names: tokens, nonces, scratch and staging names, request and session
// ids. Every byte comes from the kernel's CSPRNG (getrandom), so an id another party must not
// guess (a bearer token, a session id, a scratch directory in a shared guest /tmp) is as strong as
// the one that only has to avoid collisions.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace maf_sandbox {

// Fills `out` with random bytes. Throws SystemError when the kernel's random source fails.
void fill_random(std::span<unsigned char> out);

// `bytes` random bytes as 2 * bytes lowercase hex digits.
std::string random_hex(std::size_t bytes);

// An RFC 4122 version 4 UUID in its lowercase 8-4-4-4-12 form.
std::string random_uuid4();

}  // namespace maf_sandbox
