/* See shim.h. */
#include <stdbool.h>
#include <string.h>

#include <pmix.h>

#include "shim.h"

/* This process, as PMIx_Init named it. */
static pmix_proc_t tf_me;

int tf_pmix_init(char *nspace, size_t nspace_len, uint32_t *rank)
{
	pmix_status_t rc;

	memset(&tf_me, 0, sizeof(tf_me));
	rc = PMIx_Init(&tf_me, NULL, 0);
	if (rc != PMIX_SUCCESS)
		return rc;
	if (nspace_len > 0) {
		strncpy(nspace, tf_me.nspace, nspace_len - 1);
		nspace[nspace_len - 1] = '\0';
	}
	*rank = tf_me.rank;
	return PMIX_SUCCESS;
}

int tf_pmix_put(const char *key, const char *value)
{
	pmix_value_t v;
	pmix_status_t rc;

	/* PMIx_Put copies the value: nothing to free here. */
	memset(&v, 0, sizeof(v));
	v.type = PMIX_STRING;
	v.data.string = (char *)value;
	rc = PMIx_Put(PMIX_GLOBAL, key, &v);
	if (rc != PMIX_SUCCESS)
		return rc;
	return PMIx_Commit();
}

/* A process of this namespace: `rank`, or every one (PMIX_RANK_WILDCARD). */
static void tf_proc(pmix_proc_t *p, pmix_rank_t rank)
{
	memset(p, 0, sizeof(*p));
	memcpy(p->nspace, tf_me.nspace, sizeof(p->nspace));
	p->rank = rank;
}

int tf_pmix_fence(int timeout_secs)
{
	pmix_proc_t all;
	pmix_info_t info[2];
	bool collect = true;
	pmix_status_t rc;

	tf_proc(&all, PMIX_RANK_WILDCARD);
	memset(info, 0, sizeof(info));
	PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIx_Info_load(&info[1], PMIX_TIMEOUT, &timeout_secs, PMIX_INT);
	rc = PMIx_Fence(&all, 1, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	return rc;
}

int tf_pmix_get(uint32_t rank, const char *key, int timeout_secs, char *value,
		size_t value_len)
{
	pmix_proc_t from;
	pmix_info_t info;
	pmix_value_t *v = NULL;
	pmix_status_t rc;
	size_t len;

	tf_proc(&from, rank);
	memset(&info, 0, sizeof(info));
	PMIx_Info_load(&info, PMIX_TIMEOUT, &timeout_secs, PMIX_INT);
	rc = PMIx_Get(&from, key, &info, 1, &v);
	PMIX_INFO_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS)
		return rc;
	if (v == NULL || v->type != PMIX_STRING || v->data.string == NULL) {
		rc = TF_PMIX_NOT_A_STRING;
	} else {
		len = strlen(v->data.string);
		if (len >= value_len) {
			rc = TF_PMIX_TOO_LONG;
		} else {
			memcpy(value, v->data.string, len + 1);
			rc = PMIX_SUCCESS;
		}
	}
	if (v != NULL)
		PMIX_VALUE_RELEASE(v);
	return rc;
}

int tf_pmix_finalize(void)
{
	return PMIx_Finalize(NULL, 0);
}

const char *tf_pmix_error(int status)
{
	const char *s;

	if (status == TF_PMIX_NOT_A_STRING)
		return "the value is not a string";
	if (status == TF_PMIX_TOO_LONG)
		return "the value is longer than expected";
	s = PMIx_Error_string(status);
	return s != NULL ? s : "unknown PMIx status";
}
