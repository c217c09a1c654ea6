# The offline optimum and the infinite-cache ceiling of a prefix cache (optimal_bound.h).
kvtier_add_sources(replay/prepared_trace.cc replay/optimal_bound.cc)
kvtier_add_tests(pure replay/optimal_bound_test.cc)
# The gap analysis (gap_analysis.h): oracle runs that price each piece of future knowledge.
kvtier_add_sources(replay/gap_analysis.cc)
kvtier_add_tests(pure replay/gap_analysis_test.cc)
