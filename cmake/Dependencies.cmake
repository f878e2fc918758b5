# Every third-party dependency is a Debian 12 package installed by scripts/bootstrap.
find_package(Boost 1.81 EXACT REQUIRED COMPONENTS json url)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(OpenSSL REQUIRED)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
pkg_check_modules(LIBCAP REQUIRED IMPORTED_TARGET libcap)
pkg_check_modules(LIBNL REQUIRED IMPORTED_TARGET libnl-3.0 libnl-route-3.0)
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)
if(MAF_BENCH AND NOT MAF_UNIT_ONLY)
  find_package(benchmark REQUIRED)
endif()

# Boost.Asio's coroutine support and one-TU-per-heavy-header discipline: keep these definitions
# identical in every target so precompiled headers and ccache entries are shared.
add_library(maf_boost INTERFACE)
target_link_libraries(maf_boost INTERFACE Boost::headers Boost::json Threads::Threads)
target_compile_definitions(maf_boost INTERFACE BOOST_ASIO_NO_DEPRECATED BOOST_ASIO_DISABLE_BOOST_COROUTINE)

# The Python package (src/python) needs pybind11-dev and the interpreter Debian's python3-pybind11
# and python3-pytest install into: the system python3, not one earlier on PATH (a pyenv shim) that
# would have neither.
set(maf_python_default OFF)
if(NOT MAF_UNIT_ONLY AND NOT MAF_FUZZ AND NOT MAF_SANITIZE)
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module)
  if(Python3_FOUND)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(pybind11_FOUND)
    set(maf_python_default ON)
  endif()
endif()
option(MAF_PYTHON "Build the maf_sandbox Python package (pybind11)" ${maf_python_default})
