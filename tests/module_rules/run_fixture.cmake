# Configures a copy of fixture/ with the violation CASE names and checks the configure's verdict:
#   clean           passes;
#   public_include  base includes top's public header: fails naming the file, the include and
#                   base's (empty) list;
#   private_include base includes a private header of leaf by a relative path: fails the same way;
#   link            base links leaf: fails naming the target, the link and the list.
# Usage: cmake -DCASE=<case> -DFIXTURE=<dir> -DRULES=<ModuleRules.cmake> -DWORK=<dir> -P <this>
file(REMOVE_RECURSE ${WORK})
file(COPY ${FIXTURE}/ DESTINATION ${WORK}/tree)
set(expected "")
if(CASE STREQUAL "public_include")
  file(WRITE ${WORK}/tree/src/base/bad.cpp "#include \"maf_sandbox/top/top.hpp\"\n")
  set(expected "module base: src/base/bad.cpp includes \"maf_sandbox/top/top.hpp\" of module top, outside its declared dependencies \\(none\\)")
elseif(CASE STREQUAL "private_include")
  file(WRITE ${WORK}/tree/src/base/bad.hpp "#pragma once\n#include \"../leaf/leaf.hpp\"\n")
  set(expected "module base: src/base/bad.hpp includes \"../leaf/leaf.hpp\" of module leaf, outside its declared dependencies \\(none\\)")
elseif(CASE STREQUAL "link")
  set(expected "module base: target base links leaf of module leaf, outside its declared dependencies \\(none\\)")
elseif(NOT CASE STREQUAL "clean")
  message(FATAL_ERROR "unknown case '${CASE}'")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/tree -B ${WORK}/build
                        -DMAF_MODULE_RULES=${RULES} -DMODULE_RULES_CASE=${CASE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \t\r\n]+" " " err_flat "${err}")
if(CASE STREQUAL "clean")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "the clean fixture failed to configure:\n${err}")
  endif()
elseif(result EQUAL 0)
  message(FATAL_ERROR "case ${CASE}: the configure passed; it must fail")
elseif(NOT err_flat MATCHES "${expected}")
  message(FATAL_ERROR "case ${CASE}: the configure failed without the expected message\n"
                      "expected: ${expected}\ngot:\n${err}")
endif()
