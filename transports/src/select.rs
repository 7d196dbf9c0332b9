//! Chooses the transport at run time, so that one binary runs over TCP on a
//! laptop and over a fabric on a cluster by configuration alone: the
//! [`TransportSettings`] parsed from `TASKFOLD_TRANSPORT`,
//! `TASKFOLD_FI_PROVIDER`, `TASKFOLD_FI_WAIT`, `TASKFOLD_BIND_HOST`,
//! `TASKFOLD_TCP_THREADS` and `TASKFOLD_TCP_CMA` (see
//! `taskfold_core::settings` and the book's Configuration chapter).
//!
//! `libfabric` needs a build with the cargo feature `libfabric`; without
//! it, [`start`] fails with a message saying so.

use crate::tcp::{TcpConfig, TcpTransport};
use crate::{Transport, TransportError};
use std::sync::Arc;
use taskfold_core::settings::{TransportKind, TransportSettings};

/// True if this build has the libfabric transport (cargo feature
/// `libfabric`).
pub const fn libfabric_built() -> bool {
    cfg!(feature = "libfabric")
}

/// `tcp` with what `settings` changes in it: the bind address, the thread
/// count, same-node loans and rings.
pub fn tcp_config(settings: &TransportSettings, mut tcp: TcpConfig) -> TcpConfig {
    if let Some(ip) = settings.bind_host {
        tcp.bind_host = ip;
    }
    if let Some(n) = settings.tcp_threads {
        tcp.threads = n;
    }
    tcp.loans = tcp.loans && settings.tcp_loans;
    tcp.rings = tcp.rings && settings.tcp_rings;
    tcp
}

/// Starts the transport `settings` choose (blocking, like
/// [`TcpTransport::start`]), with `tcp` as the TCP transport's
/// configuration (the libfabric transport bootstraps over it) before
/// `settings` change it ([`tcp_config`]).
pub fn start(
    settings: &TransportSettings,
    tcp: TcpConfig,
) -> Result<Arc<dyn Transport>, TransportError> {
    let tcp = tcp_config(settings, tcp);
    match settings.kind {
        TransportKind::Tcp => Ok(TcpTransport::start(tcp)? as Arc<dyn Transport>),
        #[cfg(feature = "libfabric")]
        TransportKind::Libfabric => {
            use crate::libfabric::{LibfabricConfig, LibfabricTransport, WaitMode};
            use taskfold_core::settings::FiWait;
            // Its bootstrap transport runs itself: the libfabric
            // transport does not hand a driver on.
            let mut tcp = tcp;
            tcp.threads = tcp.threads.max(1);
            let mut cfg = LibfabricConfig::new(tcp, settings.fi_provider.clone());
            if settings.fi_wait == FiWait::Auto {
                cfg.wait = WaitMode::Auto;
            }
            Ok(LibfabricTransport::start(cfg)? as Arc<dyn Transport>)
        }
        #[cfg(not(feature = "libfabric"))]
        TransportKind::Libfabric => {
            let _ = tcp;
            Err(TransportError::Io(
                "TASKFOLD_TRANSPORT=libfabric, but this build has no libfabric transport: \
                 rebuild with the cargo feature `libfabric` (needs libfabric-dev)"
                    .into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::MasterAddr;

    fn tcp() -> TcpConfig {
        TcpConfig::new(
            0,
            1,
            1,
            MasterAddr::Addr("127.0.0.1:1".parse().expect("address")),
        )
    }

    #[test]
    fn settings_change_the_tcp_configuration() {
        let base = tcp();
        let same = tcp_config(&TransportSettings::default(), tcp());
        assert_eq!(
            (same.bind_host, same.threads, same.loans, same.rings),
            (base.bind_host, base.threads, base.loans, base.rings)
        );
        let s = TransportSettings {
            bind_host: Some("10.0.0.5".parse().expect("ip")),
            tcp_threads: Some(0),
            tcp_loans: false,
            tcp_rings: false,
            ..TransportSettings::default()
        };
        let c = tcp_config(&s, tcp());
        assert_eq!(
            c.bind_host,
            "10.0.0.5".parse::<std::net::IpAddr>().expect("ip")
        );
        assert_eq!(c.threads, 0);
        assert!(!c.loans);
        assert!(!c.rings);
    }

    #[cfg(not(feature = "libfabric"))]
    #[test]
    fn libfabric_without_the_feature_is_a_clear_error() {
        let s = TransportSettings {
            kind: TransportKind::Libfabric,
            ..TransportSettings::default()
        };
        let e = start(&s, tcp()).err().expect("an error");
        assert!(e.to_string().contains("feature `libfabric`"), "{e}");
    }
}
