/* See shim.h: one exported wrapper per static inline libfabric call. */
#include <string.h>

#include "shim.h"

uint32_t tf_fi_header_version(void)
{
	return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
}

struct fi_info *tf_fi_allocinfo(void) { return fi_allocinfo(); }
char *tf_fi_strdup(const char *s) { return strdup(s); }
int tf_fi_close(struct fid *fid) { return fi_close(fid); }
int tf_fi_control(struct fid *fid, int command, void *arg)
{
	return fi_control(fid, command, arg);
}

int tf_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		 struct fid_domain **domain, void *context)
{
	return fi_domain(fabric, info, domain, context);
}

int tf_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	return fi_trywait(fabric, fids, count);
}

int tf_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		   struct fid_ep **ep, void *context)
{
	return fi_endpoint(domain, info, ep, context);
}

int tf_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}

int tf_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }

ssize_t tf_fi_cancel(struct fid *fid, void *context)
{
	return fi_cancel(fid, context);
}

int tf_fi_getname(struct fid *fid, void *addr, size_t *addrlen)
{
	return fi_getname(fid, addr, addrlen);
}

int tf_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		  struct fid_cq **cq, void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}

ssize_t tf_fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}

ssize_t tf_fi_cq_readfrom(struct fid_cq *cq, void *buf, size_t count,
			  fi_addr_t *src_addr)
{
	return fi_cq_readfrom(cq, buf, count, src_addr);
}

ssize_t tf_fi_cq_sreadfrom(struct fid_cq *cq, void *buf, size_t count,
			   fi_addr_t *src_addr, const void *cond, int timeout)
{
	return fi_cq_sreadfrom(cq, buf, count, src_addr, cond, timeout);
}

ssize_t tf_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf,
			 uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}

ssize_t tf_fi_cq_sread(struct fid_cq *cq, void *buf, size_t count,
		       const void *cond, int timeout)
{
	return fi_cq_sread(cq, buf, count, cond, timeout);
}

int tf_fi_cq_signal(struct fid_cq *cq) { return fi_cq_signal(cq); }

const char *tf_fi_cq_strerror(struct fid_cq *cq, int prov_errno,
			      const void *err_data, char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}

int tf_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		  struct fid_av **av, void *context)
{
	return fi_av_open(domain, attr, av, context);
}

int tf_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		    fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}

int tf_fi_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count,
		    uint64_t flags)
{
	return fi_av_remove(av, fi_addr, count, flags);
}

int tf_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
		 uint64_t access, uint64_t offset, uint64_t requested_key,
		 uint64_t flags, struct fid_mr **mr, void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key,
			 flags, mr, context);
}

void *tf_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t tf_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }

int tf_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags)
{
	return fi_mr_bind(mr, bfid, flags);
}

int tf_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }

ssize_t tf_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		    fi_addr_t dest_addr, uint64_t tag, void *context)
{
	return fi_tsend(ep, buf, len, desc, dest_addr, tag, context);
}

ssize_t tf_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		    fi_addr_t src_addr, uint64_t tag, uint64_t ignore,
		    void *context)
{
	return fi_trecv(ep, buf, len, desc, src_addr, tag, ignore, context);
}

ssize_t tf_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
		   fi_addr_t src_addr, uint64_t addr, uint64_t key,
		   void *context)
{
	return fi_read(ep, buf, len, desc, src_addr, addr, key, context);
}
