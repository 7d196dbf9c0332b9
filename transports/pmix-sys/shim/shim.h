/*
 * taskfold's shim over the PMIx client: the five calls of a bootstrap
 * through the launcher's key-value store, with plain C types. PMIx passes
 * values and attributes in tagged unions that it fills and frees with
 * macros; the shim keeps them on the C side, so the Rust side handles
 * only strings and numbers.
 *
 * Every function returns a PMIx status: 0 (PMIX_SUCCESS) or a negative
 * code that tf_pmix_error names.
 */
#ifndef TASKFOLD_PMIX_SHIM_H
#define TASKFOLD_PMIX_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* Not a PMIx code: the value under the key is not a string. */
#define TF_PMIX_NOT_A_STRING (-100001)
/* Not a PMIx code: the value does not fit the caller's buffer. */
#define TF_PMIX_TOO_LONG (-100002)

/* PMIx_Init: this process's namespace (NUL-terminated, cut to
 * nspace_len - 1 bytes) and rank. Kept for the calls below. */
int tf_pmix_init(char *nspace, size_t nspace_len, uint32_t *rank);

/* PMIx_Put of a string, for every process of the job (PMIX_GLOBAL), then
 * PMIx_Commit. */
int tf_pmix_put(const char *key, const char *value);

/* PMIx_Fence over every process of this namespace, collecting the data
 * put before it; fails with PMIX_ERR_TIMEOUT after timeout_secs (> 0). */
int tf_pmix_fence(int timeout_secs);

/* PMIx_Get of the string rank `rank` of this namespace put under `key`,
 * copied NUL-terminated into value (at most value_len bytes, with the
 * NUL); waits at most timeout_secs (> 0). */
int tf_pmix_get(uint32_t rank, const char *key, int timeout_secs, char *value,
		size_t value_len);

/* PMIx_Finalize, without a barrier. */
int tf_pmix_finalize(void);

/* PMIx_Error_string, or the shim's own codes' names; never NULL. */
const char *tf_pmix_error(int status);

#endif
