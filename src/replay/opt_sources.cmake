# The offline optimum and the infinite-cache ceiling of a prefix cache (optimal_bound.h).
kvtier_add_sources(replay/optimal_bound.cc)
kvtier_add_tests(pure replay/optimal_bound_test.cc)
