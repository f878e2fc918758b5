#include "file_stream.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "maf_sandbox/core/off_loop.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {

FileStream::FileStream(OpenedFile file, std::uint64_t piece_bytes, ByteBudget::Hold hold,
                       boost::asio::thread_pool& pool, std::shared_ptr<const void> owner)
    : fd_(std::move(file.fd)),
      size_(file.size),
      buffer_(static_cast<std::size_t>(std::max<std::uint64_t>(1, piece_bytes)), '\0'),
      hold_(std::move(hold)),
      pool_(pool),
      owner_(std::move(owner)) {}

Task<std::string_view> FileStream::next() {
    if (offset_ >= size_) {
        co_return std::string_view{};
    }
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buffer_.size(), size_ - offset_));
    auto job = [fd = fd_.get(), data = buffer_.data(), want, offset = offset_]() -> std::size_t {
        for (;;) {
            const auto n = ::pread(fd, data, want, static_cast<off_t>(offset));
            if (n >= 0) {
                return static_cast<std::size_t>(n);
            }
            if (errno != EINTR) {
                throw Refusal{500, "FileOperationFailed",
                              fmt::format("Reading the file failed: {}.", std::strerror(errno))};
            }
        }
    };
    const std::size_t n = co_await off_loop(pool_, job);
    offset_ += n;
    co_return std::string_view(buffer_.data(), n);
}

}  // namespace maf_sandbox::emulator
