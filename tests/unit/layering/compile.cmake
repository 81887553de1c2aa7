# tests/unit/layering/compile.cmake - one layering check, run by ctest:
#   cmake -DCC=<compiler> -DINCLUDES=<dir>|<dir>... -DSRC=<file.c>
#         -DEXPECT=missing|ok [-DDEFINE=<macro>] [-DHEADER=ctrain/<name>.h]
#         -P compile.cmake
# Compiles SRC (syntax only) with exactly INCLUDES ('|'-separated: a library's
# include directories, transitive ones included). EXPECT=missing passes only
# when the compile fails with the compiler's missing-header error for HEADER
# (the one SRC includes: ctrain/kube_client.h unless told); EXPECT=ok passes
# only when it compiles.
if(NOT HEADER)
  set(HEADER ctrain/kube_client.h)
endif()
string(REPLACE "." "\\." _header_re "${HEADER}")
string(REPLACE "|" ";" _dirs "${INCLUDES}")
set(_args -std=c17 -fsyntax-only)
foreach(_d IN LISTS _dirs)
  if(NOT _d STREQUAL "")
    list(APPEND _args "-I${_d}")
  endif()
endforeach()
if(DEFINE)
  list(APPEND _args "-D${DEFINE}")
endif()
execute_process(COMMAND ${CC} ${_args} ${SRC} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                ERROR_VARIABLE _out)
string(REPLACE ";" " " _cmd "${CC} ${_args} ${SRC}")
message("${_cmd}\n${_out}")
if(EXPECT STREQUAL "missing")
  # gcc: "ctrain/kube_client.h: No such file or directory";
  # clang: "'ctrain/kube_client.h' file not found".
  if(_rc EQUAL 0)
    message(FATAL_ERROR "layering: compiled, but this library must not see ${HEADER}")
  elseif(NOT _out MATCHES "${_header_re}'?:? (No such file or directory|file not found)")
    message(FATAL_ERROR "layering: failed, but not with the missing-header error (rc ${_rc})")
  endif()
  message("layering: ${HEADER} is not on this library's include path: ok")
elseif(EXPECT STREQUAL "ok")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "layering: the control did not compile (rc ${_rc})")
  endif()
  message("layering: control compiled: ok")
else()
  message(FATAL_ERROR "layering: EXPECT must be missing or ok, not '${EXPECT}'")
endif()
