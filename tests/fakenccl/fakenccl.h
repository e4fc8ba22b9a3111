/* Test controls of the stand-in NCCL (tests/fakenccl, never installed). A
 * test finds them with dlsym on the handle of libnccl.so.2; on a real NCCL
 * they are absent.
 *
 * Thread safety: every function may be called concurrently with each other
 * and with NCCL calls. */
#ifndef STRATA_FAKENCCL_H
#define STRATA_FAKENCCL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the `nth` call (1 = the next) from now of NCCL function `name`
 * (e.g. "ncclAllReduce") made on a communicator of rank `rank` (-1: any
 * rank) return `result` (an ncclResult_t) without doing anything, once.
 * Replaces an earlier setting for the same name. Returns 0, or -1 for a null
 * name, nth 0 or result 0. */
int fakenccl_fail_call(const char* name, int rank, unsigned long long nth, int result);

/* The version ncclGetVersion reports from now on (NCCL_VERSION_CODE form,
 * e.g. 21803 for 2.18.3); 0 restores the header's. */
void fakenccl_set_version(int version);

/* Communicators not yet destroyed, and registrations not yet deregistered. */
unsigned long long fakenccl_live_comms(void);
unsigned long long fakenccl_live_registrations(void);

/* Forgets injected failures not yet triggered and restores the version. */
void fakenccl_reset(void);

#ifdef __cplusplus
}
#endif

#endif
