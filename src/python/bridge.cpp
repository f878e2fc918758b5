#include "bridge.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <new>
#include <string_view>
#include <vector>

#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/capacity_error.hpp"

namespace maf_sandbox::python {

namespace {

// How long interpreter exit waits for cancelled operations to finish their cleanup (an exec's
// process tree killed, a half-made sandbox removed).
constexpr std::chrono::seconds kShutdownGrace{20};

// The maf_sandbox.errors class for the most derived protocol type `error` is. Most derived first:
// the first match wins.
std::string_view python_class_of(const Error& error) {
#define MAF_PY_CLASS(Type, Name)                        \
    if (dynamic_cast<const Type*>(&error) != nullptr) { \
        return Name;                                    \
    }
    // The ACAS backend's refinements of the protocol's families.
    MAF_PY_CLASS(acas::AcasEgressPolicyConflict, "AcasEgressPolicyConflict")
    MAF_PY_CLASS(acas::AcasEntryPayloadIncomplete, "AcasEntryPayloadIncomplete")
    MAF_PY_CLASS(acas::AcasClientCloseError, "AcasClientCloseError")
    MAF_PY_CLASS(acas::AcasBackendClosed, "AcasBackendClosed")
    MAF_PY_CLASS(acas::AcasCredentialError, "AcasCredentialError")
    MAF_PY_CLASS(acas::AcasAuthorizationError, "AcasAuthorizationError")
    MAF_PY_CLASS(acas::AcasServiceError, "AcasServiceError")
    MAF_PY_CLASS(acas::AcasServiceUnreachable, "AcasServiceUnreachable")
    MAF_PY_CLASS(acas::AcasThrottled, "AcasThrottled")
    MAF_PY_CLASS(acas::AcasRequestOutcomeUnknown, "AcasRequestOutcomeUnknown")
    MAF_PY_CLASS(acas::AcasExecCaptureFailed, "AcasExecCaptureFailed")
    MAF_PY_CLASS(acas::AcasEmulatorMismatch, "AcasEmulatorMismatch")
    // ValueError family.
    MAF_PY_CLASS(ConfinementEscape, "ConfinementEscape")
    MAF_PY_CLASS(ExecOutputLimitExceeded, "SandboxExecOutputLimitExceeded")
    MAF_PY_CLASS(InvalidArgument, "InvalidArgument")
    // Router refusals.
    MAF_PY_CLASS(SandboxBackendNotPermitted, "SandboxBackendNotPermitted")
    MAF_PY_CLASS(SandboxCapabilityDenied, "SandboxCapabilityDenied")
    MAF_PY_CLASS(SandboxIdentityDenied, "SandboxIdentityDenied")
    MAF_PY_CLASS(EgressPolicyConflict, "EgressPolicyConflict")
    MAF_PY_CLASS(SandboxEgressNotEnforced, "SandboxEgressNotEnforced")
    MAF_PY_CLASS(SandboxTransferLimitsNotPermitted, "SandboxTransferLimitsNotPermitted")
    MAF_PY_CLASS(PolicyRefusal, "PolicyRefusal")
    // The backend cannot.
    MAF_PY_CLASS(NoSandboxBackend, "NoSandboxBackend")
    MAF_PY_CLASS(SandboxCapabilityNotSupported, "SandboxCapabilityNotSupported")
    MAF_PY_CLASS(SandboxOsFamilyNotSupported, "SandboxOsFamilyNotSupported")
    MAF_PY_CLASS(SandboxIsolationScopeNotSupported, "SandboxIsolationScopeNotSupported")
    MAF_PY_CLASS(SandboxCapacityExceeded, "SandboxCapacityExceeded")
    // OSError family.
    MAF_PY_CLASS(SandboxFilePermissionRefused, "SandboxFilePermissionRefused")
    MAF_PY_CLASS(SandboxFileRefused, "SandboxFileRefused")
    MAF_PY_CLASS(PermissionDenied, "PermissionDenied")
    MAF_PY_CLASS(NotADirectory, "NotADirectory")
    MAF_PY_CLASS(FileNotFound, "FileNotFound")
    MAF_PY_CLASS(IsADirectory, "IsADirectory")
    MAF_PY_CLASS(FileError, "FileError")
    MAF_PY_CLASS(SandboxShellTransferFailed, "SandboxShellTransferFailed")
    MAF_PY_CLASS(SandboxShellTransferUnfinished, "SandboxShellTransferUnfinished")
    // Outputs.
    MAF_PY_CLASS(SandboxOutputMissing, "SandboxOutputMissing")
    MAF_PY_CLASS(SandboxOutputNotConfined, "SandboxOutputNotConfined")
    MAF_PY_CLASS(SandboxOutputNotRegular, "SandboxOutputNotRegular")
    MAF_PY_CLASS(SandboxOutputSizeUnknown, "SandboxOutputSizeUnknown")
    MAF_PY_CLASS(SandboxOutputUnreachable, "SandboxOutputUnreachable")
    MAF_PY_CLASS(SandboxTransferCapExceeded, "SandboxTransferCapExceeded")
    MAF_PY_CLASS(SandboxLandingNotConfined, "SandboxLandingNotConfined")
    MAF_PY_CLASS(SandboxOutputSinkRequired, "SandboxOutputSinkRequired")
    MAF_PY_CLASS(SandboxArtifactNameInvalid, "SandboxArtifactNameInvalid")
    MAF_PY_CLASS(SandboxArtifactNameCollision, "SandboxArtifactNameCollision")
    MAF_PY_CLASS(SandboxLandingExists, "SandboxLandingExists")
    MAF_PY_CLASS(SandboxOutputError, "SandboxOutputError")
    // Retry later.
    MAF_PY_CLASS(SandboxCleanupPending, "SandboxCleanupPending")
    MAF_PY_CLASS(SandboxInvalidated, "SandboxInvalidated")
    MAF_PY_CLASS(SandboxTransientError, "SandboxTransientError")
    // Timeouts.
    MAF_PY_CLASS(SandboxProgramTimeout, "SandboxProgramTimeout")
    MAF_PY_CLASS(SandboxQueuedTimeout, "SandboxQueuedTimeout")
    MAF_PY_CLASS(Timeout, "Timeout")
    // The rest.
    MAF_PY_CLASS(NotImplemented, "SandboxNotImplemented")
    MAF_PY_CLASS(CloseError, "CloseError")
    MAF_PY_CLASS(ConformanceFailure, "ConformanceFailure")
    MAF_PY_CLASS(SystemError, "SandboxSystemError")
#undef MAF_PY_CLASS
    return "SandboxError";
}

// The Python instance for a protocol error: its class, its message (with every layer's context),
// and the fields its C++ type carries.
py::object protocol_error(const Error& error) {
    const auto errors = py::module_::import("maf_sandbox.errors");
    auto instance = errors.attr(std::string(python_class_of(error)).c_str())(error.what());
    instance.attr("cause") = py::str(error.cause());
    if (const auto* file = dynamic_cast<const FileError*>(&error); file != nullptr) {
        if (file->error_number() != 0) {
            instance.attr("errno") = file->error_number();
        }
    }
    if (const auto* refused = dynamic_cast<const SandboxFileRefused*>(&error); refused != nullptr) {
        instance.attr("refusal") = py::str(std::string(to_string(refused->refusal())));
    }
    if (const auto* over = dynamic_cast<const ExecOutputLimitExceeded*>(&error); over != nullptr) {
        instance.attr("stdout_head") = py::bytes(over->stdout_head());
        instance.attr("stderr_head") = py::bytes(over->stderr_head());
        instance.attr("total_bytes") = over->total_bytes();
        instance.attr("exit_code") = over->exit_code();
    }
    if (const auto* late = dynamic_cast<const SandboxProgramTimeout*>(&error); late != nullptr) {
        instance.attr("output") = py::str(late->output());
        instance.attr("signal") = py::str(late->signal());
        instance.attr("reach") = py::str(late->reach());
    }
    if (const auto* service = dynamic_cast<const acas::AcasServiceError*>(&error);
        service != nullptr) {
        instance.attr("status") = service->status();
        instance.attr("code") = py::str(service->code());
    }
    if (const auto* system = dynamic_cast<const SystemError*>(&error); system != nullptr) {
        instance.attr("errno") = system->error_number();
    }
    if (const auto* failure = dynamic_cast<const ConformanceFailure*>(&error); failure != nullptr) {
        instance.attr("suite") = py::str(failure->suite());
    }
    return instance;
}

py::object builtin_error(PyObject* type, const char* message) {
    return py::reinterpret_borrow<py::object>(type)(py::str(message));
}

}  // namespace

OperationState::~OperationState() {
    if (done) {
        py::gil_scoped_acquire gil;
        done = py::object();
    }
}

void Operation::cancel() const {
    boost::asio::post(EventLoop::instance().context(), [state = state_] {
        state->signal.emit(boost::asio::cancellation_type::terminal);
    });
}

EventLoop& EventLoop::instance() {
    static EventLoop* const loop = new EventLoop();
    return *loop;
}

EventLoop::EventLoop() : work_(io_.get_executor()) {
    thread_ = std::thread([this] {
        // A handler that throws must not end the loop every Python coroutine waits on.
        for (;;) {
            try {
                io_.run();
                return;
            } catch (...) {
            }
        }
    });
}

void EventLoop::started(OperationState* state) {
    running_.insert(state);
    const std::lock_guard lock(mutex_);
    ++count_;
}

void EventLoop::finished(OperationState* state) {
    running_.erase(state);
    const std::lock_guard lock(mutex_);
    --count_;
    idle_.notify_all();
}

void EventLoop::shutdown() {
    if (stopped_.exchange(true)) {
        return;
    }
    // Deliveries take the GIL on the loop thread: it must be free while this waits for them.
    const py::gil_scoped_release release;
    boost::asio::post(io_, [this] {
        const std::vector<OperationState*> running(running_.begin(), running_.end());
        for (auto* state : running) {
            state->signal.emit(boost::asio::cancellation_type::terminal);
        }
    });
    {
        std::unique_lock lock(mutex_);
        idle_.wait_for(lock, kShutdownGrace, [this] { return count_ == 0; });
    }
    work_.reset();
    io_.stop();
    thread_.join();
}

std::pair<Outcome, py::object> python_outcome_of(std::exception_ptr error) {
    try {
        std::rethrow_exception(error);
    } catch (const boost::system::system_error& failure) {
        if (failure.code() == boost::asio::error::operation_aborted) {
            return {Outcome::cancelled, py::str("cancelled in the C++ core")};
        }
        return {Outcome::error, builtin_error(PyExc_OSError, failure.what())};
    } catch (const Error& failure) {
        return {Outcome::error, protocol_error(failure)};
    } catch (py::error_already_set& failure) {
        return {Outcome::error, failure.value()};
    } catch (const std::bad_alloc&) {
        return {Outcome::error, builtin_error(PyExc_MemoryError, "out of memory")};
    } catch (const std::exception& failure) {
        return {Outcome::error, builtin_error(PyExc_RuntimeError, failure.what())};
    } catch (...) {
        return {Outcome::error, builtin_error(PyExc_RuntimeError, "an unknown C++ exception")};
    }
}

void register_error_translator() {
    py::register_exception_translator([](std::exception_ptr pending) {
        if (!pending) {
            return;
        }
        try {
            std::rethrow_exception(pending);
        } catch (const Error&) {
            const auto value = python_outcome_of(pending).second;
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr())), value.ptr());
        }
    });
}

}  // namespace maf_sandbox::python
