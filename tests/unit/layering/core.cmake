# tests/unit/layering/core.cmake - included by tests/unit/CMakeLists.txt: the
# pure core (ctrain_core, controller/CMakeLists.txt) does no I/O, as compile
# tests of tests/unit/layering/core_io.c compiled as a core file is (its
# include directories, controller/core_poison.h forced in:
# tests/unit/layering/compile.cmake with POISON):
#   layering_core_no_kube         "ctrain/kube_client.h" is not found (the
#                                 core links only ctrain_common)
#   layering_core_no_<name>       a call of <name> (fopen, socket, time,
#                                 getenv, pthread_create) is a poisoned
#                                 identifier
#   layering_core_control         what a core file includes and calls compiles
set(_core_dirs "$<JOIN:$<TARGET_PROPERTY:ctrain_core,INCLUDE_DIRECTORIES>,|>")
get_target_property(_core_poison ctrain_core CTRAIN_POISON_HEADER)
set(_core_cases "no_kube:missing::" "control:ok:CTRAIN_LAYERING_CONTROL:")
foreach(_fn fopen socket time getenv pthread_create)
  string(TOUPPER ${_fn} _up)
  list(APPEND _core_cases "no_${_fn}:poisoned:CTRAIN_LAYERING_${_up}:${_fn}")
endforeach()
foreach(_case IN LISTS _core_cases)
  string(REPLACE ":" ";" _f "${_case}")
  list(GET _f 0 _suffix)
  list(GET _f 1 _expect)
  list(GET _f 2 _define)
  list(GET _f 3 _name)
  add_test(NAME layering_core_${_suffix}
           COMMAND ${CMAKE_COMMAND} -DCC=${CMAKE_C_COMPILER} "-DINCLUDES=${_core_dirs}"
                   -DPOISON=${_core_poison} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/layering/core_io.c
                   -DEXPECT=${_expect} -DDEFINE=${_define} -DNAME=${_name}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/compile.cmake)
  set_tests_properties(layering_core_${_suffix} PROPERTIES TIMEOUT 60 LABELS unit)
endforeach()
