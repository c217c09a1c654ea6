# Warnings apply to kvtier's own targets only, through this interface library.
add_library(kvtier_warnings INTERFACE)
target_compile_options(kvtier_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough
  # Designated initialisers that leave fields at their defaults are the intended style.
  -Wno-missing-field-initializers)
if(KVTIER_WERROR)
  target_compile_options(kvtier_warnings INTERFACE -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(kvtier_warnings INTERFACE -Wthread-safety)
endif()
