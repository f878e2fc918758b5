# Module rules: every folder under src/ is a module that declares the modules it may use, and the
# configure fails when one of its sources or public headers includes, or one of its targets links,
# a module outside that list. The layering lives in the build, not in review.
#
# A module's name is its folder under src/ ("core", "runtime/kernel", "cli/lean"); its public
# headers are include/maf_sandbox/<name>/*.hpp and its private ones sit next to its sources. An
# include names the module that owns the file it resolves to:
#   #include "maf_sandbox/<module>/x.hpp"  the module whose public header folder holds x.hpp;
#   #include "x.hpp" (or "../y/x.hpp")      the folder under src/ the file resolves to, searched
#                                           from the including file's folder, then INCLUDE_DIRS.
# A quoted include that resolves nowhere in the project fails too: it would hide a dependency.
#
# The project root is MAF_MODULE_ROOT (PROJECT_SOURCE_DIR by default), so a fixture project can
# use these rules on a tree of its own.

# maf_module(<name> TARGETS <target>... ALLOWS <module>... [INCLUDE_DIRS <dir>...])
# Checks the module's includes now and its targets' links once the whole project is configured.
function(maf_module name)
  cmake_parse_arguments(ARG "" "" "TARGETS;ALLOWS;INCLUDE_DIRS" ${ARGN})
  if(NOT DEFINED MAF_MODULE_ROOT)
    set(MAF_MODULE_ROOT ${PROJECT_SOURCE_DIR})
  endif()
  set_property(GLOBAL APPEND PROPERTY MAF_MODULES ${name})
  set_property(GLOBAL PROPERTY MAF_MODULE_TARGETS_${name} ${ARG_TARGETS})
  set_property(GLOBAL PROPERTY MAF_MODULE_ALLOWS_${name} ${ARG_ALLOWS})
  foreach(target IN LISTS ARG_TARGETS)
    set_property(GLOBAL PROPERTY MAF_MODULE_OF_TARGET_${target} ${name})
  endforeach()
  set(allowed "${ARG_ALLOWS}")
  if(NOT allowed)
    set(allowed none)
  endif()
  set_property(GLOBAL PROPERTY MAF_MODULE_ALLOWED_TEXT_${name} "${allowed}")
  _maf_module_check_includes(${name} "${MAF_MODULE_ROOT}" "${ARG_ALLOWS}" "${ARG_INCLUDE_DIRS}")
  # Links are read once, at the end of the top-level CMakeLists, after every target_link_libraries.
  get_property(scheduled GLOBAL PROPERTY MAF_MODULE_LINK_CHECK_SCHEDULED)
  if(NOT scheduled)
    set_property(GLOBAL PROPERTY MAF_MODULE_LINK_CHECK_SCHEDULED TRUE)
    cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _maf_module_check_all_links)
  endif()
endfunction()

# The module owning `file` (an absolute, normalised path), or "" when it lies in no module folder.
function(_maf_module_owner root file out)
  set(owner "")
  foreach(base IN ITEMS "${root}/include/maf_sandbox/" "${root}/src/")
    string(FIND "${file}" "${base}" at)
    if(at EQUAL 0)
      string(LENGTH "${base}" base_length)
      string(SUBSTRING "${file}" ${base_length} -1 relative)
      get_filename_component(owner "${relative}" DIRECTORY)
      break()
    endif()
  endforeach()
  set(${out} "${owner}" PARENT_SCOPE)
endfunction()

function(_maf_module_check_includes name root allows include_dirs)
  get_property(allowed GLOBAL PROPERTY MAF_MODULE_ALLOWED_TEXT_${name})
  file(GLOB files CONFIGURE_DEPENDS ${root}/src/${name}/*.cpp ${root}/src/${name}/*.hpp
       ${root}/include/maf_sandbox/${name}/*.hpp)
  foreach(file IN LISTS files)
    file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    get_filename_component(file_dir ${file} DIRECTORY)
    file(RELATIVE_PATH shown ${root} ${file})
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" included "${line}")
      set(resolved "")
      if(included MATCHES "^maf_sandbox/")
        set(candidates "${root}/include/${included}")
      else()
        set(candidates "${file_dir}/${included}")
        foreach(dir IN LISTS include_dirs)
          list(APPEND candidates "${dir}/${included}")
        endforeach()
      endif()
      foreach(candidate IN LISTS candidates)
        if(EXISTS ${candidate})
          get_filename_component(resolved ${candidate} ABSOLUTE)
          break()
        endif()
      endforeach()
      if(resolved STREQUAL "")
        message(FATAL_ERROR "module ${name}: ${shown} includes \"${included}\", which is no file "
                            "of the project (a quoted include must name one of its headers)")
      endif()
      _maf_module_owner(${root} ${resolved} owner)
      if(owner STREQUAL "")
        message(FATAL_ERROR "module ${name}: ${shown} includes \"${included}\", which lies "
                            "outside every module folder")
      endif()
      if(NOT owner STREQUAL name AND NOT owner IN_LIST allows)
        message(FATAL_ERROR "module ${name}: ${shown} includes \"${included}\" of module "
                            "${owner}, outside its declared dependencies (${allowed})")
      endif()
    endforeach()
  endforeach()
endfunction()

function(_maf_module_check_all_links)
  get_property(modules GLOBAL PROPERTY MAF_MODULES)
  foreach(module IN LISTS modules)
    _maf_module_check_links(${module})
  endforeach()
endfunction()

function(_maf_module_check_links name)
  get_property(targets GLOBAL PROPERTY MAF_MODULE_TARGETS_${name})
  get_property(allows GLOBAL PROPERTY MAF_MODULE_ALLOWS_${name})
  get_property(allowed GLOBAL PROPERTY MAF_MODULE_ALLOWED_TEXT_${name})
  foreach(target IN LISTS targets)
    if(NOT TARGET ${target})
      continue()  # not built in this configuration
    endif()
    get_target_property(type ${target} TYPE)
    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(links ${target} LINK_LIBRARIES)
    endif()
    get_target_property(interface_links ${target} INTERFACE_LINK_LIBRARIES)
    foreach(link IN LISTS links interface_links)
      # $<LINK_ONLY:x> and $<TARGET_FILE:x> name target x too.
      string(REGEX REPLACE "^\\$<(LINK_ONLY|TARGET_FILE|TARGET_LINKER_FILE):([^>]+)>$" "\\2"
                           link "${link}")
      get_property(owner GLOBAL PROPERTY MAF_MODULE_OF_TARGET_${link})
      if(owner AND NOT owner STREQUAL name AND NOT owner IN_LIST allows)
        message(FATAL_ERROR "module ${name}: target ${target} links ${link} of module ${owner}, "
                            "outside its declared dependencies (${allowed})")
      endif()
    endforeach()
  endforeach()
endfunction()
