//! Our own connection to a peer: dialled, handshaken, its choice of wire
//! made, then written by its writer task and read for the answers to our
//! gets (the `conn` module serves the connections peers open to us).

use super::conn::{ended, read_header, read_payload, run_writer, Rd, ReadError, WriterEnd};
use super::frame::{self, kind, Header, HANDSHAKE_MAX, HEADER_LEN};
use super::integrity::MacRead;
use super::lender::Verdict as LoanCheck;
use super::peer::{Link, Shared};
use super::wire::WireRead;
use super::{get, metrics};
use std::sync::Arc;

/// Our connection to `peer`: connect, handshake, then write what is
/// queued.
pub(crate) async fn run_outgoing(shared: Arc<Shared>, peer: u32, inc: u32, rx: WriterEnd) {
    let live = shared.live_guard();
    let Some(addr) = shared.addr_of(peer) else {
        return shared.link_lost(peer, format!("no address for rank {peer}"), false);
    };
    let (rd, wr, keys) = match super::dial::connect_proven(&shared, peer, addr).await {
        Ok(c) => c,
        Err(reason) => {
            if !shared.is_closed() && shared.serves(peer, inc) {
                shared.link_lost(peer, reason, false);
            }
            return;
        }
    };
    let (mut send, recv) = match shared.integrity {
        true => {
            let (s, r) = keys.for_side(true);
            (Some(s), Some(r))
        }
        false => (None, None),
    };
    let rd = MacRead::new(WireRead::Tcp(rd), recv);
    let (rd, wr, first) = match super::switch::offer(&shared, peer, rd, wr, &mut send).await {
        Ok(w) => w,
        Err(e) => return ended(&shared, peer, inc, e, false),
    };
    {
        let mut slot = shared.slot(peer);
        if slot.link != Link::Up || slot.incarnation != inc {
            return;
        }
        let r = tokio::spawn(out_reader(shared.clone(), peer, inc, rd, first));
        slot.tasks.push(r.abort_handle());
    }
    run_writer(shared, wr, rx, peer, send).await;
    drop(live);
}

/// Reads the responses to our gets (and a goodbye or refusal), the first
/// one's header already read if `first` holds it.
async fn out_reader(
    shared: Arc<Shared>,
    peer: u32,
    inc: u32,
    mut rd: Rd,
    mut first: Option<Header>,
) {
    let _live = shared.live_guard();
    let mut lender = match (rd.inner().local_addr(), rd.inner().peer_addr()) {
        (Ok(ours), Ok(theirs)) => Some(super::lender::Lender::new(ours, theirs)),
        _ => None,
    };
    let err = loop {
        let hdr = match first.take() {
            Some(h) => h,
            None => match read_header(&mut rd).await {
                Ok(h) => h,
                Err(e) => break e,
            },
        };
        match hdr.kind {
            kind::GET_CHUNK => {
                if let Err(e) = get::on_chunk(&shared, peer, &hdr, &mut rd).await {
                    break e;
                }
            }
            kind::GET_ERR => {
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                metrics::received(HEADER_LEN as u64, 1);
                if let Err(e) = get::on_error(&shared, peer, &hdr) {
                    break e;
                }
            }
            kind::GET_LEND if hdr.len == frame::LEND_LEN || hdr.len == frame::LEND_HEAP_LEN => {
                let body = match read_payload(&mut rd, hdr.len).await {
                    Ok(b) => b,
                    Err(e) => break e,
                };
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                let (pid, heap) = match frame::decode_lend(&body) {
                    Ok(l) => l,
                    Err(e) => break ReadError::Protocol(e),
                };
                metrics::received(HEADER_LEN as u64 + u64::from(hdr.len), 1);
                let verdict = match lender.as_mut() {
                    Some(l) => l.check(pid).await,
                    None => Ok(LoanCheck::Unknown("the connection has no addresses".into())),
                };
                let read = match verdict {
                    Ok(LoanCheck::Holder) => get::on_lend(&shared, peer, &hdr, pid, heap),
                    Ok(LoanCheck::Unknown(why)) => {
                        get::decline_lend(&shared, peer, &hdr, &why);
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = read {
                    break e;
                }
            }
            kind::GOODBYE => {
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                metrics::received(HEADER_LEN as u64, 1);
                return shared.peer_gone(peer);
            }
            // Not sealed (a refusal ends the connection, which anyone on
            // the path can do anyway): its text is only quoted.
            kind::REFUSE if hdr.len <= HANDSHAKE_MAX => {
                let reason = match read_payload(&mut rd, hdr.len).await {
                    Ok(b) => taskfold_core::quote::quote(&String::from_utf8_lossy(&b)).to_string(),
                    Err(e) => e.describe(peer),
                };
                break ReadError::Protocol(format!("refused our connection: {reason}"));
            }
            k => break ReadError::Protocol(format!("unexpected frame kind {k} from a server")),
        }
    };
    ended(&shared, peer, inc, err, false);
}
