# Trace readers, the canonical trace format, tokenizers and arrival times (trace.h, tokenizer.h).
kvtier_add_sources(replay/byte_level_pretokenizer.cc replay/bpe_tokenizer.cc replay/approximate_tokenizer.cc
                   replay/chat_template.cc replay/arrival_process.cc replay/trace_reader.cc
                   replay/trace_reader_text.cc replay/trace_reader_load.cc replay/canonical_trace.cc
                   replay/trace_stats.cc)
kvtier_add_tests(pure replay/byte_level_pretokenizer_test.cc replay/bpe_tokenizer_test.cc
                 replay/chat_template_test.cc replay/arrival_process_test.cc
                 replay/trace_reader_test.cc replay/canonical_trace_test.cc
                 replay/trace_real_data_test.cc)
# ICU, when installed, gives the BPE pre-tokenizer exact Unicode classes (\p{L}, \p{N}, \s);
# without it a built-in table stands in (byte_level_pretokenizer.h).
find_package(ICU COMPONENTS uc QUIET)
# kvtierConfig.cmake (cmake/Install.cmake) finds ICU again for a consumer when it is linked.
set(KVTIER_LINKS_ICU ${ICU_FOUND} CACHE INTERNAL "kvtier links ICU::uc")
if(ICU_FOUND)
  target_link_libraries(kvtier PRIVATE ICU::uc)
  set_property(SOURCE replay/byte_level_pretokenizer.cc APPEND PROPERTY COMPILE_DEFINITIONS KVTIER_HAVE_ICU=1)
endif()
