# Shared warning flags (maf_warnings) and warning plus sanitizer flags (maf_flags, for every
# project target but static guest programs, which the sanitizers cannot link).
add_library(maf_warnings INTERFACE)
target_compile_options(maf_warnings INTERFACE -Wall -Wextra -Wpedantic)
# GCC 12 reports a false -Wmismatched-new-delete on every Asio coroutine frame (GCC bug 109224).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(maf_warnings INTERFACE -Wno-mismatched-new-delete)
endif()
if(MAF_WERROR)
  target_compile_options(maf_warnings INTERFACE -Werror)
endif()
add_library(maf_flags INTERFACE)
target_link_libraries(maf_flags INTERFACE maf_warnings)
if(MAF_SANITIZE)
  target_compile_options(maf_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
  target_link_options(maf_flags INTERFACE -fsanitize=address,undefined)
endif()

include(${CMAKE_CURRENT_LIST_DIR}/ModuleRules.cmake)

# maf_library(NAME [MODULE <module> ALLOWS <module>...] DEPS ...): a static library from this
# folder's *.cpp (but main.cpp) with the public headers under include/. MODULE declares the folder
# a module that may use only the ALLOWS modules (ModuleRules.cmake).
function(maf_library name)
  cmake_parse_arguments(ARG "" "MODULE" "ALLOWS;DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  list(FILTER sources EXCLUDE REGEX ".*/main\\.cpp$")
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC maf_flags ${ARG_DEPS})
  if(ARG_MODULE)
    maf_module(${ARG_MODULE} TARGETS ${name} ALLOWS ${ARG_ALLOWS})
  endif()
endfunction()

# maf_tests(NAME LABELS ... DEPS ...): one GoogleTest executable from this folder's *.cpp,
# registered with CTest test by test. `unit` tests also run under the sanitizers.
function(maf_tests name)
  cmake_parse_arguments(ARG "" "TIMEOUT;TEST_PREFIX" "LABELS;DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_executable(${name} ${sources})
  # Every test links the shared fixtures of tests/support (temporary directories, a host-shell
  # sandbox, a recording decorator).
  target_link_libraries(${name} PRIVATE maf_flags ${ARG_DEPS} maf_test_support GTest::gtest
                                        GTest::gmock GTest::gtest_main)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  # TEST_PREFIX (optional) names a battery in CTest, e.g. `ctest -R security`.
  gtest_discover_tests(${name} TEST_PREFIX "${ARG_TEST_PREFIX}"
                       PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       DISCOVERY_TIMEOUT 60)
endfunction()
