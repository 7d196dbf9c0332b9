//! Opening the fabric objects of one rank: the provider that offers what
//! the transport needs, its fabric, domain, completion queue, address
//! vector and endpoint, and the progress engine over them.

use super::fi::{
    self, AddressVector, CompletionQueue, Domain, Endpoint, Fabric, FabricError, Hints, InfoList,
};
use super::progress::{Engine, Tuning};
use super::shared::{Registrar, Shared};
use super::{stale, LibfabricConfig, WaitMode};
use crate::TransportError;
use std::sync::Arc;

/// The fabric objects of one rank before start-up completes.
pub(super) struct Opened {
    pub engine: Engine,
    pub sh: Arc<Shared>,
    pub av: Arc<AddressVector>,
    pub name: Vec<u8>,
    pub provider: String,
    pub fabric: String,
}

/// `FI_SOURCE`: every received message's source address is checked
/// against the rank it claims ([`super::source`]).
const CAPS: u64 = fi::bits::TAGGED | fi::bits::RMA | fi::bits::SOURCE;
const MODES: u64 = fi::bits::CONTEXT | fi::bits::CONTEXT2;
const MR_MODES: u32 =
    fi::bits::MR_LOCAL | fi::bits::MR_VIRT_ADDR | fi::bits::MR_ALLOCATED | fi::bits::MR_PROV_KEY;

/// The providers of this machine that offer what the transport needs
/// (reliable datagrams, tagged messages, RMA), by name, best first.
pub fn available_providers() -> Vec<String> {
    let hints = Hints {
        provider: None,
        source: None,
        caps: CAPS,
        mode: MODES,
        mr_mode: MR_MODES,
        manual_progress: false,
    };
    let mut names: Vec<String> = Vec::new();
    if let Ok(list) = InfoList::get(&hints) {
        for i in list.iter() {
            let p = i.provider();
            if !names.contains(&p) {
                names.push(p);
            }
        }
    }
    names
}

/// True if `provider` is available on this machine.
pub fn provider_available(provider: &str) -> bool {
    find(&Some(provider.to_string()), None).is_ok()
}

/// The providers matching our needs. With a `source` address, IP-addressed
/// providers are asked to bind it; others (`shm`, whose endpoint names are
/// derived from the node given) are asked without it. Manual progress is
/// asked for (the progress thread polls anyway; a provider thread would
/// only compete for cores), and done without if the provider refuses.
pub(super) fn find(
    provider: &Option<String>,
    source: Option<String>,
) -> Result<InfoList, FabricError> {
    let mut hints = Hints {
        provider: provider.clone(),
        source: None,
        caps: CAPS,
        mode: MODES,
        mr_mode: MR_MODES,
        manual_progress: true,
    };
    let any = match InfoList::get(&hints) {
        Err(e) if e.code == fi::bits::ENODATA => {
            hints.manual_progress = false;
            InfoList::get(&hints)?
        }
        r => r?,
    };
    if source.is_none() || !any.first().ip_addressed() {
        return Ok(any);
    }
    match InfoList::get(&Hints { source, ..hints }) {
        Err(e) if e.code == fi::bits::ENODATA => Ok(any),
        r => r,
    }
}

pub(super) fn open(cfg: &LibfabricConfig) -> Result<Opened, TransportError> {
    let list = find(&cfg.provider, Some(cfg.tcp.bind_host.to_string())).map_err(|e| {
        let want = cfg.provider.as_deref().unwrap_or("(any)");
        if e.code == fi::bits::ENODATA {
            TransportError::Io(format!(
                "libfabric provider `{want}` is not available here ({e}); available: {}",
                available_providers().join(", ")
            ))
        } else {
            e.into()
        }
    })?;
    let info = list.first();
    let provider = info.provider();
    let fabric_name = format!("{}/{}", info.fabric_name(), info.domain_name());
    let mr_mode = info.mr_mode();
    tracing::debug!(rank = cfg.tcp.rank, %provider, fabric = %fabric_name, mr_mode, mode = info.mode(),
        manual = info.manual_progress(),
        max_msg = info.max_msg_size(), tx = info.tx_size(), rx = info.rx_size(), "libfabric provider");
    let fabric = Fabric::open(info)?;
    let domain = Domain::open(&fabric, info)?;
    // rxm's wait set holds its connections' sockets, so fi_cq_sread wakes
    // when data arrives; `sockets`' does not (it waits out the timeout), and
    // shm's default wait spins: poll those.
    let sread = cfg.wait == WaitMode::Auto && info.provider().ends_with("ofi_rxm");
    let cq = match CompletionQueue::open(&domain, 1024, sread) {
        Ok(cq) => cq,
        Err(e) if sread => {
            tracing::debug!(error = %e, "no wait object, polling");
            CompletionQueue::open(&domain, 1024, false)?
        }
        Err(e) => return Err(e.into()),
    };
    let av = AddressVector::open(&domain, cfg.tcp.size as usize)?;
    if provider == "shm" {
        stale::clear_before_first_endpoint();
    }
    let ep = Endpoint::open(&domain, info, &cq, &av)?;
    let name = ep.name()?;
    let (cmd_tx, cmd_rx) = flume::unbounded();
    let sh = Arc::new(Shared::new(
        cfg.tcp.rank,
        cfg.tcp.size,
        cfg.tcp.loans,
        cmd_tx,
        cq.clone(),
    ));
    let reg = Arc::new(Registrar::new(
        domain.clone(),
        mr_mode & fi::bits::MR_VIRT_ADDR != 0,
        mr_mode & fi::bits::MR_PROV_KEY != 0,
    ));
    let max_msg = info.max_msg_size().max(1);
    let tuning = Tuning {
        read_chunk: cfg.read_chunk.clamp(4096, max_msg),
        op_timeout: cfg.op_timeout,
        max_get: cfg.max_get,
        max_frame: cfg.tcp.max_frame,
        mr_local: mr_mode & fi::bits::MR_LOCAL != 0,
        sread: cq.waitable(),
        tx_size: info.tx_size(),
        rx_size: info.rx_size(),
        // libfabric 1.17's shm loses messages when a receiver has more than
        // about 128 pending (fixed upstream in 1.18): stay well below.
        flow_budget: if provider == "shm" { 64 } else { 1024 },
    };
    let engine = Engine::new(ep, sh.clone(), reg, tuning, cmd_rx)?;
    Ok(Opened {
        engine,
        sh,
        av,
        name,
        provider,
        fabric: fabric_name,
    })
}
