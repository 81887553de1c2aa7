# CtrainCuda.cmake - finds the CUDA toolkit, cuBLAS and NCCL for CTRAIN_CUDA.
#
# Looks in CTRAIN_CUDA_ROOT (CMake or environment), CUDA_HOME, /usr/local/cuda,
# then the wheel-built toolkit tools/setup.sh leaves in ~/.cache/ctrain/cuda-*.
# Sets CTRAIN_HAVE_CUDA and, when ON, the imported targets CUDA::cudart,
# CUDA::cublas and ctrain_nccl. AUTO builds the CPU path alone when something
# is missing; ON fails naming what is missing; OFF never looks.
set(CTRAIN_HAVE_CUDA OFF)
if(CTRAIN_CUDA STREQUAL "OFF")
  message(STATUS "ctrain: CUDA path disabled (CTRAIN_CUDA=OFF)")
  return()
endif()

set(_ctrain_cuda_hints)
foreach(_h "${CTRAIN_CUDA_ROOT}" "$ENV{CTRAIN_CUDA_ROOT}" "$ENV{CUDA_HOME}" "/usr/local/cuda")
  if(_h AND EXISTS "${_h}/bin/nvcc")
    list(APPEND _ctrain_cuda_hints "${_h}")
  endif()
endforeach()
file(GLOB _ctrain_cached "$ENV{HOME}/.cache/ctrain/cuda-*/bin/nvcc")
foreach(_n ${_ctrain_cached})
  get_filename_component(_d "${_n}" DIRECTORY)
  get_filename_component(_d "${_d}" DIRECTORY)
  list(APPEND _ctrain_cuda_hints "${_d}")
endforeach()

if(NOT CMAKE_CUDA_COMPILER)
  find_program(CTRAIN_NVCC nvcc HINTS ${_ctrain_cuda_hints} PATH_SUFFIXES bin)
  if(CTRAIN_NVCC)
    set(CMAKE_CUDA_COMPILER "${CTRAIN_NVCC}" CACHE FILEPATH "CUDA compiler")
  endif()
endif()

set(_ctrain_cuda_missing "")
if(CMAKE_CUDA_COMPILER)
  get_filename_component(_root "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  get_filename_component(_root "${_root}" DIRECTORY)
  set(CUDAToolkit_ROOT "${_root}")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    # sm_90 is the H100/H200; 80 covers A100. Override with -DCMAKE_CUDA_ARCHITECTURES.
    set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas)
    string(APPEND _ctrain_cuda_missing " cuBLAS/CUDA runtime")
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${_root}/include" ${CUDAToolkit_INCLUDE_DIRS})
  find_library(NCCL_LIBRARY nccl HINTS "${_root}/lib" "${_root}/lib64" ${CUDAToolkit_LIBRARY_DIR})
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    string(APPEND _ctrain_cuda_missing " NCCL")
  endif()
else()
  string(APPEND _ctrain_cuda_missing " nvcc")
endif()

if(_ctrain_cuda_missing STREQUAL "")
  set(CTRAIN_HAVE_CUDA ON)
  # The directory's warning flags are gcc's: nvcc rejects them (-Werror takes
  # a value there). Keep them for C, and give CUDA sources the host
  # compiler's warnings through -Xcompiler plus nvcc's own -Werror.
  get_directory_property(_ctrain_opts COMPILE_OPTIONS)
  set(_ctrain_c_opts)
  foreach(_o ${_ctrain_opts})
    list(APPEND _ctrain_c_opts "$<$<COMPILE_LANGUAGE:C>:${_o}>")
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_ctrain_c_opts}")
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
  if(CTRAIN_WERROR)
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>")
  endif()
  add_library(ctrain_nccl INTERFACE IMPORTED)
  target_include_directories(ctrain_nccl INTERFACE "${NCCL_INCLUDE_DIR}")
  target_link_libraries(ctrain_nccl INTERFACE "${NCCL_LIBRARY}")
  # CMake drops the toolkit's directory from RPATH (an implicit CUDA link
  # directory), but the wheel-built toolkit is not on the loader's path: name
  # it (and NCCL's) explicitly so tests and ctrain-worker run from the build.
  get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
  target_link_options(ctrain_nccl INTERFACE "LINKER:-rpath,${CUDAToolkit_LIBRARY_DIR}"
                      "LINKER:-rpath,${_nccl_dir}")
  message(STATUS "ctrain: CUDA path ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, NCCL ${NCCL_LIBRARY})")
elseif(CTRAIN_CUDA STREQUAL "ON")
  message(FATAL_ERROR "ctrain: CTRAIN_CUDA=ON but missing:${_ctrain_cuda_missing} "
                      "(run tools/setup.sh, or set CTRAIN_CUDA_ROOT)")
else()
  message(STATUS "ctrain: CUDA path OFF (AUTO; missing:${_ctrain_cuda_missing})")
endif()
