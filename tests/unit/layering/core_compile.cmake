# tests/unit/layering/core_compile.cmake - one layering check of the pure core
# (ctrain_core), run by ctest (tests/unit/layering/core.cmake):
#   cmake -DCC=<compiler> -DINCLUDES=<dir>|<dir>... -DPOISON=<core_poison.h>
#         -DSRC=<file.c> -DEXPECT=missing|poisoned|ok [-DDEFINE=<macro>]
#         [-DNAME=<header or identifier>] -P core_compile.cmake
# Compiles SRC (syntax only) as a file of the core is compiled: exactly
# INCLUDES ('|'-separated: the core's include directories, transitive ones
# included), _GNU_SOURCE (the project's one definition), -Wall -Wextra
# -Werror and POISON forced in first (-include). EXPECT=missing passes only
# when the compile fails with the compiler's missing-header error for NAME
# (ctrain/kube_client.h unless told); EXPECT=poisoned only when it fails
# with the compiler's poisoned-identifier error on NAME (gcc: 'attempt to
# use poisoned "fopen"'; clang: 'attempt to use a poisoned identifier' and
# the line that names it); EXPECT=ok only when it compiles.
if(NOT NAME)
  set(NAME ctrain/kube_client.h)
endif()
string(REPLACE "." "\\." _name_re "${NAME}")
string(REPLACE "|" ";" _dirs "${INCLUDES}")
set(_args -std=c17 -fsyntax-only -Wall -Wextra -Werror -D_GNU_SOURCE -include ${POISON})
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
  if(_rc EQUAL 0)
    message(FATAL_ERROR "layering: compiled, but the core must not see ${NAME}")
  elseif(NOT _out MATCHES "${_name_re}'?:? (No such file or directory|file not found)")
    message(FATAL_ERROR "layering: failed, but not with the missing-header error (rc ${_rc})")
  endif()
  message("layering: ${NAME} is not on the core's include path: ok")
elseif(EXPECT STREQUAL "poisoned")
  if(_rc EQUAL 0)
    message(FATAL_ERROR "layering: compiled, but the core must not call ${NAME}")
  elseif(NOT _out MATCHES "attempt to use (a )?poisoned" OR NOT _out MATCHES "[^A-Za-z0-9_]${_name_re}[^A-Za-z0-9_]")
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
