// The typed hierarchy's two cross-cutting rules: errors gain context on their way up and keep
// their type, fields and innermost message; and "retry later" has its own family, apart from
// the output family and from Timeout, so a caller can retry exactly what is retryable.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "maf_sandbox/core/error_context.hpp"
#include "maf_sandbox/core/error_detail.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

TEST(ErrorContext, EachLayerPrefixesWhatItWasDoingAndTheErrorKeepsItsTypeAndFields) {
    try {
        with_context_now("acquire sandbox for key s/t kind shell", [] {
            with_context_now("create sandbox",
                             [] { throw SystemError(ENOSPC, "write the state record"); });
        });
        FAIL() << "nothing was thrown";
    } catch (const SystemError& error) {
        EXPECT_EQ(error.error_number(), ENOSPC);
        EXPECT_EQ(std::string(error.what()),
                  "acquire sandbox for key s/t kind shell: create sandbox: write the state "
                  "record: " +
                      std::string(std::strerror(ENOSPC)));
        EXPECT_EQ(std::string(error.cause()),
                  "write the state record: " + std::string(std::strerror(ENOSPC)));
        EXPECT_EQ(error.type_name(), "SystemError");
    }
}

TEST(ErrorContext, AwaitedWorkGainsContextAndAResultPassesThrough) {
    auto failing = []() -> Task<int> {
        throw SandboxCleanupPending("an earlier sandbox could not be deleted yet");
        co_return 0;
    };
    try {
        run_blocking(with_context("acquire sandbox for key s/t kind shell", failing()));
        FAIL() << "nothing was thrown";
    } catch (const SandboxCleanupPending& error) {
        EXPECT_EQ(std::string(error.what()),
                  "acquire sandbox for key s/t kind shell: an earlier sandbox could not be "
                  "deleted yet");
    }
    auto answering = []() -> Task<int> { co_return 7; };
    EXPECT_EQ(run_blocking(with_context("count", answering())), 7);
}

TEST(ErrorContext, AFileRefusalKeepsBothOfItsFamiliesAndItsErrno) {
    try {
        with_context_now("write_file report.txt",
                         [] { throw_file_refused(FileRefusal::permission_denied, "refused"); });
        FAIL() << "nothing was thrown";
    } catch (const PermissionDenied& error) {
        EXPECT_EQ(error.error_number(), EACCES);
        EXPECT_NE(dynamic_cast<const SandboxFileRefused*>(&error), nullptr);
        EXPECT_EQ(std::string(error.what()), "write_file report.txt: refused");
    }
}

TEST(ErrorContext, ANestedOrCopiedErrorCarriesItsContext) {
    std::exception_ptr kept;
    try {
        with_context_now("resume sandbox sb-1", [] { throw Timeout("not Running in time"); });
    } catch (...) {
        kept = std::current_exception();
    }
    EXPECT_EQ(error_detail(kept), "Timeout: resume sandbox sb-1: not Running in time");
    try {
        try {
            std::rethrow_exception(kept);
        } catch (const Timeout&) {
            std::throw_with_nested(SandboxTransientError("the held sandbox could not be resumed"));
        }
    } catch (const SandboxTransientError& outer) {
        try {
            std::rethrow_if_nested(outer);
            FAIL() << "the cause was not kept";
        } catch (const Timeout& inner) {
            EXPECT_EQ(std::string(inner.what()), "resume sandbox sb-1: not Running in time");
        }
    }
}

TEST(ErrorContext, WhatIsNotOursPassesUntouched) {
    try {
        with_context_now("create sandbox", [] { throw std::runtime_error("plain"); });
    } catch (const std::runtime_error& error) {
        EXPECT_EQ(std::string(error.what()), "plain");
    }
    try {
        with_context_now("create sandbox", [] {
            throw std::system_error(std::make_error_code(std::errc::operation_canceled));
        });
    } catch (const std::system_error& error) {
        EXPECT_EQ(error.code(), std::errc::operation_canceled);
    }
    Error empty_context("message");
    empty_context.add_context("");
    EXPECT_EQ(std::string(empty_context.what()), "message");
}

TEST(TransientErrors, RetryLaterIsItsOwnFamilyNeitherOutputNorTimeout) {
    const SandboxCleanupPending pending("a scope purge for this conversation is running");
    const SandboxInvalidated invalidated("this sandbox was invalidated; reacquire it");
    for (const Error* error :
         {static_cast<const Error*>(&pending), static_cast<const Error*>(&invalidated)}) {
        EXPECT_NE(dynamic_cast<const SandboxTransientError*>(error), nullptr);
        EXPECT_EQ(dynamic_cast<const SandboxOutputError*>(error), nullptr);
        EXPECT_EQ(dynamic_cast<const Timeout*>(error), nullptr);
        EXPECT_EQ(dynamic_cast<const InvalidArgument*>(error), nullptr);
        EXPECT_EQ(dynamic_cast<const PolicyRefusal*>(error), nullptr);
    }
    EXPECT_EQ(pending.type_name(), "SandboxCleanupPending");
    EXPECT_EQ(invalidated.type_name(), "SandboxInvalidated");
    EXPECT_EQ(SandboxTransientError("x").type_name(), "SandboxTransientError");
    // The output family is only about outputs again.
    EXPECT_EQ(dynamic_cast<const SandboxTransientError*>(static_cast<const Error*>(
                  &static_cast<const SandboxOutputError&>(SandboxOutputMissing("missing")))),
              nullptr);
}

TEST(TransientErrors, CaughtAsAnyErrorTheyReportTheirOwnTypeForLogsAndExitCodes) {
    std::exception_ptr error;
    try {
        throw SandboxInvalidated("the sandbox was invalidated during acquire; retry the acquire");
    } catch (...) {
        error = std::current_exception();
    }
    EXPECT_EQ(error_detail(error),
              "SandboxInvalidated: the sandbox was invalidated during acquire; retry the acquire");
    try {
        std::rethrow_exception(error);
    } catch (const Error& caught) {
        EXPECT_EQ(caught.type_name(), "SandboxInvalidated");
    }
}

}  // namespace
}  // namespace maf_sandbox
