# The CUDA backend: kernels/cuda/*.cu -> trestle_cuda (op table, cuBLASLt GEMMs, mixed-precision
# casts, device arenas), NCCL for runtime/comm/nccl.c. Included by the top CMakeLists only when
# nvcc was found; CI compiles and links all of it even without a GPU.
find_package(CUDAToolkit REQUIRED)

# sm_80 (A100) and sm_90 (H100/H200). Nothing here needs the sm_90a-only instructions (wgmma), so
# the plain targets suffice (docs/cuda.md). -DTRESTLE_CUDA_ARCHITECTURES=90 (or a plain
# -DCMAKE_CUDA_ARCHITECTURES=90 on the command line) builds one target, half the compile time.
set(TRESTLE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA targets of trestle_cuda")
get_property(_tr_arch_type CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY TYPE)
if(_tr_arch_type STREQUAL "UNINITIALIZED")
  set(TRESTLE_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
endif()
set(CMAKE_CUDA_STANDARD 17)
# No relocatable device code, so nothing needs nvcc's device link: executables that link the
# static trestle_cuda stay linked by the C compiler (and keep the C link flags, sanitizers too).
set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES 0)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

file(GLOB TRESTLE_CUDA_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
add_library(trestle_cuda STATIC ${TRESTLE_CUDA_SRC})
# The directory-wide C flags (-Werror, sanitizers) are gcc spellings that nvcc misreads, so this
# target sets its own: warnings as errors in host code through the host compiler.
# TRESTLE_CUDA_WERROR=OFF is for one-off builds with another host compiler (gpu_check.sh).
option(TRESTLE_CUDA_WERROR "Treat warnings in CUDA sources as errors" ON)
set_property(TARGET trestle_cuda PROPERTY COMPILE_OPTIONS "")
target_compile_options(trestle_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -D_GNU_SOURCE --expt-relaxed-constexpr
                             -lineinfo>)
if(TRESTLE_CUDA_WERROR)
  target_compile_options(trestle_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror --Werror=all-warnings>)
endif()
set_target_properties(trestle_cuda PROPERTIES CUDA_ARCHITECTURES "${TRESTLE_CUDA_ARCHITECTURES}"
                      POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Shared)
target_include_directories(trestle_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(trestle_cuda PUBLIC trestle_config CUDA::cudart CUDA::cublasLt m)

# NCCL ships with the toolkit on our machines (/usr/local/cuda) or as libnccl-dev.
find_library(TRESTLE_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(TRESTLE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(TRESTLE_NCCL_LIB AND TRESTLE_NCCL_INCLUDE)
  set(TRESTLE_HAVE_NCCL ON)
  target_include_directories(trestle_cuda PUBLIC ${TRESTLE_NCCL_INCLUDE})
  target_link_libraries(trestle_cuda PUBLIC ${TRESTLE_NCCL_LIB})
else()
  message(STATUS "NCCL not found: runtime/comm/nccl.c builds only the host-staged MPI path")
endif()

# runtime/comm/nccl.c lives in trestle_runtime (compiled always; stubs without CUDA), so the
# runtime gets the CUDA headers and, through trestle_cuda, the libraries; consumers of the
# runtime link the CUDA backend only in this configuration.
if(TARGET trestle_runtime)
  get_target_property(_tr_rt_type trestle_runtime TYPE)
  if(_tr_rt_type STREQUAL "STATIC_LIBRARY")
    target_compile_definitions(trestle_runtime PRIVATE TRESTLE_HAVE_CUDA=1)
    if(TRESTLE_HAVE_NCCL)
      target_compile_definitions(trestle_runtime PRIVATE TRESTLE_HAVE_NCCL=1)
    endif()
    target_link_libraries(trestle_runtime PUBLIC trestle_cuda)
  endif()
endif()
