/*
 * taskfold's shim over libfabric: libfabric defines most of its calls as
 * `static inline` functions that jump through the provider's ops tables,
 * which bindgen cannot bind. Each function here is a plain, exported
 * wrapper around exactly one of them, with the same arguments and result.
 */
#ifndef TASKFOLD_LIBFABRIC_SHIM_H
#define TASKFOLD_LIBFABRIC_SHIM_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) of the headers built against. */
uint32_t tf_fi_header_version(void);

struct fi_info *tf_fi_allocinfo(void);
/* strdup(3): strings put into an fi_info are freed by fi_freeinfo. */
char *tf_fi_strdup(const char *s);
int tf_fi_close(struct fid *fid);
int tf_fi_control(struct fid *fid, int command, void *arg);

int tf_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		 struct fid_domain **domain, void *context);
int tf_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count);

int tf_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		   struct fid_ep **ep, void *context);
int tf_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int tf_fi_enable(struct fid_ep *ep);
ssize_t tf_fi_cancel(struct fid *fid, void *context);
int tf_fi_getname(struct fid *fid, void *addr, size_t *addrlen);

int tf_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		  struct fid_cq **cq, void *context);
ssize_t tf_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
/* As fi_cq_read / fi_cq_sread, with each completion's source address
 * (FI_SOURCE): its index in the address vector, or FI_ADDR_NOTAVAIL. */
ssize_t tf_fi_cq_readfrom(struct fid_cq *cq, void *buf, size_t count,
			  fi_addr_t *src_addr);
ssize_t tf_fi_cq_sreadfrom(struct fid_cq *cq, void *buf, size_t count,
			   fi_addr_t *src_addr, const void *cond, int timeout);
ssize_t tf_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf,
			 uint64_t flags);
ssize_t tf_fi_cq_sread(struct fid_cq *cq, void *buf, size_t count,
		       const void *cond, int timeout);
int tf_fi_cq_signal(struct fid_cq *cq);
const char *tf_fi_cq_strerror(struct fid_cq *cq, int prov_errno,
			      const void *err_data, char *buf, size_t len);

int tf_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		  struct fid_av **av, void *context);
int tf_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		    fi_addr_t *fi_addr, uint64_t flags, void *context);
int tf_fi_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count,
		    uint64_t flags);

int tf_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
		 uint64_t access, uint64_t offset, uint64_t requested_key,
		 uint64_t flags, struct fid_mr **mr, void *context);
void *tf_fi_mr_desc(struct fid_mr *mr);
uint64_t tf_fi_mr_key(struct fid_mr *mr);
int tf_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int tf_fi_mr_enable(struct fid_mr *mr);

ssize_t tf_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		    fi_addr_t dest_addr, uint64_t tag, void *context);
ssize_t tf_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		    fi_addr_t src_addr, uint64_t tag, uint64_t ignore,
		    void *context);
ssize_t tf_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
		   fi_addr_t src_addr, uint64_t addr, uint64_t key,
		   void *context);

#endif
