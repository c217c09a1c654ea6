# kvtier_embed_files(OUTPUT <file.cc> NAMESPACE <ns> FILES <f>...)
# Generates a C++ source holding each file's bytes and its base name, so that the binary
# carries its data (the model catalog) and runs from any directory.
function(kvtier_embed_files)
  cmake_parse_arguments(ARG "" "OUTPUT;NAMESPACE" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT ${ARG_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${ARG_OUTPUT} -DNAMESPACE=${ARG_NAMESPACE}
            "-DFILES=${ARG_FILES}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFilesScript.cmake
    DEPENDS ${ARG_FILES} ${PROJECT_SOURCE_DIR}/cmake/EmbedFilesScript.cmake
    COMMENT "Embedding ${ARG_NAMESPACE} data"
    VERBATIM)
endfunction()
