# Host emulation of the CUDA kernels: the kernel bodies of kernels/cuda/*_kernels.cuh compiled as
# C++ and run on the CPU by tests/emu/cuda_emu.h, against the CPU backend's ops (docs/cuda.md).
# They need the CUDA toolkit's headers, no GPU, so they run wherever the CUDA backend builds.
# Not in the sanitizer build: the emulated threads are ucontext fibres, whose stack switches
# ASan does not follow (and the emulator guards shared memory and tensors with PROT_NONE pages
# itself).
if(NOT TARGET trestle_cuda OR TRESTLE_SANITIZE)
  return()
endif()
enable_language(CXX)

file(GLOB TRESTLE_EMU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/emu/test_*.cpp)
foreach(src ${TRESTLE_EMU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/unit/harness.c)
  set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                        CXX_EXTENSIONS OFF)
  target_include_directories(${name} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  # The kernels carry nvcc's #pragma unroll and bit-cast CUDA's vector types with memcpy, both
  # right for the device; the host compiler would warn about them.
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>
                         $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-class-memaccess>)
  target_link_libraries(${name} PRIVATE trestle_kernels trestle_config)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;emu" TIMEOUT 120)
endforeach()
