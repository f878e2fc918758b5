// Internal: a guest file being read out in pieces. The file plane's child opened and checked it
// (file_plane.hpp); this reads the descriptor one piece at a time on the service's worker pool,
// so a read holds one piece of memory whatever the file's size. No HTTP types: the route hands
// it to the server as a streamed body.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "byte_budget.hpp"
#include "file_plane.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::emulator {

class FileStream {
  public:
    // `owner` keeps `pool` alive; `hold` is the piece's share of the in-flight budget.
    FileStream(OpenedFile file, std::uint64_t piece_bytes, ByteBudget::Hold hold,
               boost::asio::thread_pool& pool, std::shared_ptr<const void> owner);

    // The size the file had when it was opened: exactly this many bytes are sent.
    std::uint64_t size() const { return size_; }
    // The next piece (valid until the next call), or empty once size() bytes were given or the
    // file ended early (it shrank while being read: the caller then drops the answer).
    Task<std::string_view> next();

  private:
    runtime::UniqueFd fd_;
    std::uint64_t size_;
    std::uint64_t offset_ = 0;
    std::string buffer_;
    ByteBudget::Hold hold_;
    boost::asio::thread_pool& pool_;
    std::shared_ptr<const void> owner_;
};

}  // namespace maf_sandbox::emulator
