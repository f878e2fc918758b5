// The chained credential, the cache that refreshes before expiry, and the default chain.
#include <fmt/format.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>

#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::azure {
namespace {

namespace asio = boost::asio;

class ChainedCredential : public TokenCredential {
  public:
    explicit ChainedCredential(std::vector<std::shared_ptr<TokenCredential>> sources)
        : sources_(std::move(sources)) {}
    std::string_view name() const override { return "ChainedTokenCredential"; }

    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        if (chosen_) {
            co_return co_await chosen_->get_token(std::move(scopes));
        }
        std::string reasons;
        for (const auto& source : sources_) {
            try {
                auto token = co_await source->get_token(scopes);
                chosen_ = source;
                co_return token;
            } catch (const CredentialUnavailable& e) {
                reasons += fmt::format("\n  - {}", e.what());
            }
        }
        throw CredentialUnavailable("no Azure credential is available here; configure one of:" +
                                    reasons);
    }

  private:
    std::vector<std::shared_ptr<TokenCredential>> sources_;
    std::shared_ptr<TokenCredential> chosen_;
};

std::string scope_key(const std::vector<std::string>& scopes) {
    std::string key;
    for (const auto& scope : scopes)
        key += scope + '\n';
    return key;
}

class CachingCredential : public TokenCredential {
  public:
    explicit CachingCredential(std::shared_ptr<TokenCredential> inner) : inner_(std::move(inner)) {}
    std::string_view name() const override { return inner_->name(); }

    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        const auto key = scope_key(scopes);
        for (;;) {
            std::optional<AccessToken> cached;
            bool fetch = false;
            {
                std::lock_guard lock(mutex_);
                auto& slot = slots_[key];
                const auto now = WallClock::now();
                if (slot.token && now < refresh_point(*slot.token)) {
                    co_return *slot.token;
                }
                if (!slot.fetching) {
                    slot.fetching = true;
                    fetch = true;
                } else if (slot.token && now < slot.token->expires_on) {
                    // Someone is refreshing; the current token is still good.
                    co_return *slot.token;
                }
                cached = slot.token;
            }
            if (fetch) {
                std::exception_ptr failure;
                try {
                    auto token = co_await inner_->get_token(scopes);
                    // Fixed once, at arrival: a refresh point recomputed on every call would drift.
                    token.refresh_on = refresh_point(token);
                    std::lock_guard lock(mutex_);
                    auto& slot = slots_[key];
                    slot.token = token;
                    slot.fetching = false;
                    co_return token;
                } catch (...) {
                    failure = std::current_exception();
                }
                {
                    std::lock_guard lock(mutex_);
                    slots_[key].fetching = false;
                }
                if (cached && WallClock::now() < cached->expires_on) {
                    co_return *cached;
                }
                std::rethrow_exception(failure);
            }
            // Another caller is fetching and nothing valid is cached: wait briefly and look again.
            asio::steady_timer pause(co_await asio::this_coro::executor);
            pause.expires_after(std::chrono::milliseconds(10));
            co_await pause.async_wait(asio::use_awaitable);
        }
    }

  private:
    static WallClock::time_point refresh_point(const AccessToken& token) {
        if (token.refresh_on)
            return *token.refresh_on;
        const auto now = WallClock::now();
        const auto remaining = token.expires_on - now;
        return remaining <= std::chrono::minutes(10) ? now + remaining / 2
                                                     : token.expires_on - std::chrono::minutes(5);
    }

    struct Slot {
        std::optional<AccessToken> token;
        bool fetching = false;
    };
    std::shared_ptr<TokenCredential> inner_;
    std::mutex mutex_;
    std::map<std::string, Slot> slots_;
};

}  // namespace

std::shared_ptr<TokenCredential> make_chained_credential(
    std::vector<std::shared_ptr<TokenCredential>> sources) {
    return std::make_shared<ChainedCredential>(std::move(sources));
}

std::shared_ptr<TokenCredential> make_caching_credential(std::shared_ptr<TokenCredential> inner) {
    if (!inner)
        throw InvalidArgument("a caching credential needs a credential to wrap");
    return std::make_shared<CachingCredential>(std::move(inner));
}

std::shared_ptr<TokenCredential> make_default_azure_credential(
    boost::asio::any_io_executor executor, CredentialOptions options) {
    return make_caching_credential(make_chained_credential({
        make_environment_credential(executor, options),
        make_workload_identity_credential(executor, options),
        make_managed_identity_credential(executor, options),
        make_azure_cli_credential(executor, options),
    }));
}

}  // namespace maf_sandbox::azure
