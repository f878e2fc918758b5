// The bridge between Python's asyncio and the C++ coroutines: one io_context the module owns, run
// on a thread of its own, and a way to start a Task there and hear how it ended.
//
// Python starts an operation with a `done(kind, value)` callable; the Task is posted to the loop
// thread and runs there without the GIL. When it ends, the loop thread takes the GIL once and calls
// `done` with RESULT and the converted value, ERROR and the Python exception (the hierarchy of
// maf_sandbox.errors), or CANCELLED when the C++ side was cancelled. The Python side
// (maf_sandbox/_aio.py) turns that into an asyncio Future with loop.call_soon_threadsafe.
// Cancelling the returned Operation emits a terminal Asio cancellation into the Task.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::python {

namespace py = pybind11;

// How an operation ended, as `done`'s first argument.
enum class Outcome : int { result = 0, error = 1, cancelled = 2 };

// One started Task: its cancellation signal (touched only on the loop thread) and the Python
// callable that hears its end (touched only with the GIL).
struct OperationState {
    explicit OperationState(py::object callback) : done(std::move(callback)) {}
    OperationState(const OperationState&) = delete;
    OperationState& operator=(const OperationState&) = delete;
    // `done` is released once it was called; holding it still means the Task never ended (the
    // loop stopped first), and its reference may only be dropped with the GIL.
    ~OperationState();

    boost::asio::cancellation_signal signal;
    py::object done;
};

// The handle Python keeps: cancel() asks the Task to stop (terminal cancellation); the Task still
// reports how it ended.
class Operation {
  public:
    explicit Operation(std::shared_ptr<OperationState> state) : state_(std::move(state)) {}
    void cancel() const;

  private:
    std::shared_ptr<OperationState> state_;
};

// The module's event loop. Created on first use; shutdown() runs at interpreter exit.
class EventLoop {
  public:
    static EventLoop& instance();

    boost::asio::io_context& context() noexcept { return io_; }

    // Loop thread only: the operations still running, which shutdown() cancels.
    void started(OperationState* state);
    void finished(OperationState* state);

    // Cancels every running operation, waits (bounded) for them to end so their cleanup runs,
    // then stops the loop thread. Called with the GIL held; releases it while it waits.
    void shutdown();

  private:
    EventLoop();
    ~EventLoop() = delete;  // lives until the process ends: handlers may outlive the interpreter

    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::set<OperationState*> running_;  // loop thread only
    std::mutex mutex_;
    std::condition_variable idle_;
    std::size_t count_ = 0;  // guarded by mutex_
    std::atomic<bool> stopped_{false};
    std::thread thread_;
};

// The Python exception for a C++ exception (GIL held): the class of maf_sandbox.errors matching
// the most derived protocol type, with the message and the type's fields as attributes.
// Cancellation (operation_aborted) is reported as Outcome::cancelled.
std::pair<Outcome, py::object> python_outcome_of(std::exception_ptr error);

// Registers the translator that raises the same classes from synchronous calls.
void register_error_translator();

// Calls `done` on the loop thread (GIL taken here): the converted value, or the exception.
template <typename Make>
void deliver(OperationState& state, std::exception_ptr error, Make make_value) {
    py::gil_scoped_acquire gil;
    std::pair<Outcome, py::object> outcome{Outcome::result, py::none()};
    if (error) {
        outcome = python_outcome_of(error);
    } else {
        try {
            outcome.second = make_value();
        } catch (...) {
            outcome = python_outcome_of(std::current_exception());
        }
    }
    try {
        state.done(static_cast<int>(outcome.first), outcome.second);
    } catch (py::error_already_set& failure) {
        failure.discard_as_unraisable("maf_sandbox: delivering an operation's outcome");
    }
    state.done = py::object();
}

// Starts `task` on the loop (called from Python, GIL held: the Task only starts on the loop
// thread). `convert` turns its value into a Python object on delivery, with the GIL.
template <typename T, typename Convert>
Operation launch(py::object done, Task<T> task, Convert convert) {
    auto state = std::make_shared<OperationState>(std::move(done));
    auto& loop = EventLoop::instance();
    boost::asio::post(loop.context(), [state, &loop, task = std::move(task),
                                       convert = std::move(convert)]() mutable {
        loop.started(state.get());
        auto slot = state->signal.slot();
        if constexpr (std::is_void_v<T>) {
            boost::asio::co_spawn(loop.context(), std::move(task),
                                  boost::asio::bind_cancellation_slot(
                                      slot, [state, &loop, convert](std::exception_ptr error) {
                                          loop.finished(state.get());
                                          deliver(*state, error, [&] { return convert(); });
                                      }));
        } else {
            boost::asio::co_spawn(
                loop.context(), std::move(task),
                boost::asio::bind_cancellation_slot(
                    slot, [state, &loop, convert](std::exception_ptr error, T value) mutable {
                        loop.finished(state.get());
                        deliver(*state, error, [&] { return convert(std::move(value)); });
                    }));
        }
    });
    return Operation(std::move(state));
}

}  // namespace maf_sandbox::python
