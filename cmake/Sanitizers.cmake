# KVTIER_SANITIZE is a list: "address;undefined" for the asan preset, "thread" for tsan.
if(KVTIER_SANITIZE)
  list(JOIN KVTIER_SANITIZE "," _kvtier_sanitizers)
  add_compile_options(-fsanitize=${_kvtier_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_kvtier_sanitizers})
endif()

# The fuzz preset instruments all of kvtier for coverage; only fuzz targets link libFuzzer.
if(KVTIER_BUILD_FUZZERS)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
