# tests/unit/layering/compile.cmake - one layering check, run by ctest:
#   cmake -DCC=<compiler> -DINCLUDES=<dir>|<dir>... -DSRC=<file.c>
#         -DEXPECT=missing|poisoned|ok [-DDEFINE=<macro>]
#         [-DHEADER=ctrain/<name>.h] [-DPOISON=<core_poison.h> -DNAME=<identifier>]
#         -P compile.cmake
# Compiles SRC (syntax only) with exactly INCLUDES ('|'-separated: a library's
# include directories, transitive ones included). With POISON it is compiled
# as a file of the controller's pure core (ctrain_core) is: _GNU_SOURCE (the
# project's one definition), -Wall -Wextra -Werror and POISON forced in first
# (-include; tests/unit/layering/core.cmake). EXPECT=missing passes only when
# the compile fails with the compiler's missing-header error for HEADER (the
# one SRC includes: ctrain/kube_client.h unless told); EXPECT=poisoned only
# when it fails with the compiler's poisoned-identifier error on NAME (gcc:
# 'attempt to use poisoned "fopen"'; clang: 'attempt to use a poisoned
# identifier' and the line that names it); EXPECT=ok only when it compiles.
if(NOT HEADER)
  set(HEADER ctrain/kube_client.h)
endif()
string(REPLACE "." "\\." _header_re "${HEADER}")
string(REPLACE "|" ";" _dirs "${INCLUDES}")
set(_args -std=c17 -fsyntax-only)
if(POISON)
  set(_what "the core")
  list(APPEND _args -Wall -Wextra -Werror -D_GNU_SOURCE -include ${POISON})
else()
  set(_what "this library")
endif()
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
    message(FATAL_ERROR "layering: compiled, but ${_what} must not see ${HEADER}")
  elseif(NOT _out MATCHES "${_header_re}'?:? (No such file or directory|file not found)")
    message(FATAL_ERROR "layering: failed, but not with the missing-header error (rc ${_rc})")
  endif()
  message("layering: ${HEADER} is not on ${_what}'s include path: ok")
elseif(EXPECT STREQUAL "poisoned")
  string(REPLACE "." "\\." _name_re "${NAME}")
  if(NOT POISON OR NOT NAME)
    message(FATAL_ERROR "layering: EXPECT=poisoned needs POISON and NAME")
  elseif(_rc EQUAL 0)
    message(FATAL_ERROR "layering: compiled, but the core must not call ${NAME}")
  elseif(NOT _out MATCHES "attempt to use (a )?poisoned"
         OR NOT _out MATCHES "[^A-Za-z0-9_]${_name_re}[^A-Za-z0-9_]")
    message(FATAL_ERROR "layering: failed, but not with the poisoned-identifier error on ${NAME} "
                        "(rc ${_rc})")
  endif()
  message("layering: ${NAME} is poisoned in the core: ok")
elseif(EXPECT STREQUAL "ok")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "layering: the control did not compile (rc ${_rc})")
  endif()
  message("layering: control compiled: ok")
else()
  message(FATAL_ERROR "layering: EXPECT must be missing, poisoned or ok, not '${EXPECT}'")
endif()
