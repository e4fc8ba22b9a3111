/* Compiled as C: strata/residency.h is valid C, and these are calls as a C
 * program makes them (residency_c_api_test.cpp uses them). */
#include "strata/residency.h"

strata_status c_register_parameter(strata_residency* r, size_t bytes, uint64_t* handle) {
  return strata_residency_register(r, bytes, STRATA_BUFFER_PARAMETER, STRATA_EVICTABLE, handle);
}

/* The buffer's tier, or -1 (and the status in *why) when where() fails. */
int c_tier_of(strata_residency* r, uint64_t handle, strata_status* why) {
  strata_tier t = STRATA_TIER_NONE;
  *why = strata_residency_where(r, handle, &t);
  return *why == STRATA_OK ? (int)t : -1;
}
