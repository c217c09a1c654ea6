# CUDA is optional. AUTO uses the toolkit when CMake finds one. The runtime is linked
# statically (cudart_static), which loads the driver (libcuda.so) with dlopen at the first
# CUDA call: every binary therefore starts on a machine without a GPU or a driver.
set(KVTIER_HAVE_CUDA OFF)
if(NOT KVTIER_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(KVTIER_HAVE_CUDA ON)
    message(STATUS "kvtier: CUDA toolkit ${CUDAToolkit_VERSION} found; CUDA parts enabled")
  elseif(KVTIER_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_WITH_CUDA=ON but no CUDA toolkit was found (set CUDAToolkit_ROOT)")
  else()
    message(STATUS "kvtier: no CUDA toolkit; CUDA parts disabled")
  endif()
endif()
