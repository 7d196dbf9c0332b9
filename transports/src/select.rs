//! Chooses the transport at run time, so that one binary runs over TCP on a
//! laptop and over a fabric on a cluster by configuration alone.
//!
//! - `TASKFOLD_TRANSPORT`: `tcp` (the default) or `libfabric`.
//! - `TASKFOLD_FI_PROVIDER`: the libfabric provider (`tcp;ofi_rxm`,
//!   `sockets`, `shm`, `verbs;ofi_rxm`, ...); unset, libfabric chooses
//!   (and honours its own `FI_PROVIDER`).
//! - `TASKFOLD_FI_WAIT`: `poll` (the default: the progress thread polls
//!   with a short backoff) or `auto` (it blocks in `fi_cq_sread` where the
//!   provider has wait objects).
//! - `TASKFOLD_BIND_HOST`: the address this rank listens on and is reached
//!   at (127.0.0.1 by default: one node; `0.0.0.0` for several nodes).
//!
//! `libfabric` needs a build with the cargo feature `libfabric`; without
//! it, [`from_env_config`] fails with a message saying so.

use crate::tcp::{TcpConfig, TcpTransport};
use crate::{Transport, TransportError};
use std::sync::Arc;

/// Environment variable choosing the transport.
pub const TRANSPORT_ENV: &str = "TASKFOLD_TRANSPORT";
/// Environment variable naming the libfabric provider.
pub const PROVIDER_ENV: &str = "TASKFOLD_FI_PROVIDER";
/// Environment variable choosing how the libfabric progress thread waits.
pub const WAIT_ENV: &str = "TASKFOLD_FI_WAIT";

/// A transport choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The TCP transport.
    Tcp,
    /// The libfabric transport.
    Libfabric {
        /// The provider (`None`: libfabric's choice).
        provider: Option<String>,
        /// Block in `fi_cq_sread` when idle (`TASKFOLD_FI_WAIT=auto`).
        sread: bool,
    },
}

/// True if this build has the libfabric transport (cargo feature
/// `libfabric`).
pub const fn libfabric_built() -> bool {
    cfg!(feature = "libfabric")
}

impl Choice {
    /// The choice described by the variables `get` returns.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Choice, TransportError> {
        let t = get(TRANSPORT_ENV).unwrap_or_default();
        match t.trim().to_ascii_lowercase().as_str() {
            "" | "tcp" => Ok(Choice::Tcp),
            "libfabric" => {
                let provider = get(PROVIDER_ENV)
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty());
                let sread = match get(WAIT_ENV).unwrap_or_default().trim() {
                    "" | "poll" => false,
                    "auto" => true,
                    other => {
                        return Err(TransportError::Io(format!(
                            "{WAIT_ENV}={other:?}: expected `poll` or `auto`"
                        )))
                    }
                };
                Ok(Choice::Libfabric { provider, sread })
            }
            other => Err(TransportError::Io(format!(
                "{TRANSPORT_ENV}={other:?}: expected `tcp` or `libfabric`"
            ))),
        }
    }

    /// The choice the process environment describes.
    pub fn from_env() -> Result<Choice, TransportError> {
        Choice::from_vars(|k| std::env::var(k).ok())
    }

    /// Starts the chosen transport (blocking, like [`TcpTransport::start`]).
    pub fn start(&self, tcp: TcpConfig) -> Result<Arc<dyn Transport>, TransportError> {
        match self {
            Choice::Tcp => Ok(TcpTransport::start(tcp)? as Arc<dyn Transport>),
            #[cfg(feature = "libfabric")]
            Choice::Libfabric { provider, sread } => {
                use crate::libfabric::{LibfabricConfig, LibfabricTransport, WaitMode};
                // Its bootstrap transport runs itself: the libfabric
                // transport does not hand a driver on.
                let mut tcp = tcp;
                tcp.threads = tcp.threads.max(1);
                let mut cfg = LibfabricConfig::new(tcp, provider.clone());
                if *sread {
                    cfg.wait = WaitMode::Auto;
                }
                Ok(LibfabricTransport::start(cfg)? as Arc<dyn Transport>)
            }
            #[cfg(not(feature = "libfabric"))]
            Choice::Libfabric { .. } => {
                let _ = tcp;
                Err(TransportError::Io(format!(
                    "{TRANSPORT_ENV}=libfabric, but this build has no libfabric transport: \
                     rebuild with the cargo feature `libfabric` (needs libfabric-dev)"
                )))
            }
        }
    }
}

/// Environment variable naming the address this rank's listener binds
/// (and that other ranks use to reach it): 127.0.0.1 by default, which
/// keeps a job on one node. For ranks on several nodes, set it to the
/// node's address on the cluster's network, or to `0.0.0.0`: then peers
/// are told the address the master sees the rank connect from, and rank 0
/// writes its host name's address into the rendezvous file.
pub const BIND_ENV: &str = "TASKFOLD_BIND_HOST";

/// The bind address `get` describes (`None`: keep the default).
pub fn bind_host_from_vars(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<std::net::IpAddr>, TransportError> {
    let Some(v) = get(BIND_ENV).map(|v| v.trim().to_string()) else {
        return Ok(None);
    };
    if v.is_empty() {
        return Ok(None);
    }
    let ip: std::net::IpAddr = v.parse().map_err(|_| {
        TransportError::Io(format!(
            "{BIND_ENV}={v:?}: expected an IP address of this node (e.g. 10.0.0.5)"
        ))
    })?;
    Ok(Some(ip))
}

/// Threads of the TCP transport's runtime ([`TcpConfig::threads`]).
pub const TCP_THREADS_ENV: &str = "TASKFOLD_TCP_THREADS";

/// The TCP transport's thread count from `TASKFOLD_TCP_THREADS` (unset or
/// empty: `None`, the default); anything but a count from 0 (run by the
/// caller: see [`TcpConfig::threads`]) to 64 is an error that names the
/// variable.
pub fn tcp_threads_from_vars(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<usize>, TransportError> {
    let Some(v) = get(TCP_THREADS_ENV).map(|v| v.trim().to_string()) else {
        return Ok(None);
    };
    if v.is_empty() {
        return Ok(None);
    }
    match v.parse::<usize>() {
        Ok(n) if (0..=64).contains(&n) => Ok(Some(n)),
        _ => Err(TransportError::Io(format!(
            "{TCP_THREADS_ENV}={v:?}: expected a number of threads from 0 to 64"
        ))),
    }
}

/// Starts the transport the environment asks for (`TASKFOLD_TRANSPORT`,
/// `TASKFOLD_FI_PROVIDER`, `TASKFOLD_FI_WAIT`, `TASKFOLD_BIND_HOST`,
/// `TASKFOLD_TCP_THREADS`), with
/// `tcp` as the TCP transport's configuration (the libfabric transport
/// bootstraps over it).
pub fn from_env_config(mut tcp: TcpConfig) -> Result<Arc<dyn Transport>, TransportError> {
    let choice = Choice::from_env()?;
    if let Some(ip) = bind_host_from_vars(|k| std::env::var(k).ok())? {
        tcp.bind_host = ip;
    }
    if let Some(n) = tcp_threads_from_vars(|k| std::env::var(k).ok())? {
        tcp.threads = n;
    }
    choice.start(tcp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn parses_the_tcp_thread_count() {
        let get = |v: &'static str| tcp_threads_from_vars(vars(&[(TCP_THREADS_ENV, v)]));
        assert_eq!(tcp_threads_from_vars(vars(&[])), Ok(None));
        assert_eq!(get(""), Ok(None));
        assert_eq!(get(" 1 "), Ok(Some(1)));
        assert_eq!(get("4"), Ok(Some(4)));
        assert_eq!(get("0"), Ok(Some(0)));
        for bad in ["65", "two", "-1"] {
            let e = get(bad).unwrap_err().to_string();
            assert!(
                e.contains(TCP_THREADS_ENV) && e.contains("0 to 64"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn parses_choices() {
        assert_eq!(Choice::from_vars(vars(&[])), Ok(Choice::Tcp));
        assert_eq!(
            Choice::from_vars(vars(&[(TRANSPORT_ENV, "TCP")])),
            Ok(Choice::Tcp)
        );
        assert_eq!(
            Choice::from_vars(vars(&[
                (TRANSPORT_ENV, "libfabric"),
                (PROVIDER_ENV, "tcp;ofi_rxm")
            ])),
            Ok(Choice::Libfabric {
                provider: Some("tcp;ofi_rxm".into()),
                sread: false
            })
        );
        assert_eq!(
            Choice::from_vars(vars(&[(TRANSPORT_ENV, "libfabric"), (WAIT_ENV, "auto")])),
            Ok(Choice::Libfabric {
                provider: None,
                sread: true
            })
        );
        assert!(Choice::from_vars(vars(&[(TRANSPORT_ENV, "carrier-pigeon")])).is_err());
        assert!(
            Choice::from_vars(vars(&[(TRANSPORT_ENV, "libfabric"), (WAIT_ENV, "spin")])).is_err()
        );
    }

    #[test]
    fn parses_bind_hosts() {
        assert_eq!(bind_host_from_vars(vars(&[])), Ok(None));
        assert_eq!(
            bind_host_from_vars(vars(&[(BIND_ENV, " 10.0.0.5 ")])),
            Ok(Some("10.0.0.5".parse().expect("ip")))
        );
        assert_eq!(
            bind_host_from_vars(vars(&[(BIND_ENV, "::1")])),
            Ok(Some("::1".parse().expect("ip")))
        );
        let e = bind_host_from_vars(vars(&[(BIND_ENV, "node7")])).unwrap_err();
        assert!(e.to_string().contains("expected an IP address"), "{e}");
        assert_eq!(
            bind_host_from_vars(vars(&[(BIND_ENV, "0.0.0.0")])),
            Ok(Some("0.0.0.0".parse().expect("ip")))
        );
    }

    #[cfg(not(feature = "libfabric"))]
    #[test]
    fn libfabric_without_the_feature_is_a_clear_error() {
        let tcp = TcpConfig::new(
            0,
            1,
            1,
            crate::tcp::MasterAddr::Addr("127.0.0.1:1".parse().expect("address")),
        );
        let e = Choice::Libfabric {
            provider: None,
            sread: false,
        }
        .start(tcp)
        .err()
        .expect("an error");
        assert!(e.to_string().contains("feature `libfabric`"), "{e}");
    }
}
