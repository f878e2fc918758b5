// System calls that report failure in their result and never touch errno or any other memory of
// the caller's. A guest process runs in its handler's memory until its execve (exec_guest.cpp),
// errno included, while the handler runs too: from its hand-over on, the guest calls only these.
#pragma once

#include <sys/syscall.h>

namespace maf_sandbox::runtime::raw {

// The call's result, or minus its error number.
inline long call(long number, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0,
                 long f = 0) noexcept {
#if defined(__x86_64__)
    long result = 0;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return result;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
#else
#error "raw system calls are written for x86_64 and aarch64: add this architecture's convention"
#endif
}

// A pointer or descriptor as a system call argument.
template <typename T>
long arg(T* pointer) noexcept {
    return reinterpret_cast<long>(pointer);
}

}  // namespace maf_sandbox::runtime::raw
