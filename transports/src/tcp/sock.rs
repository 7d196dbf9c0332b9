//! Socket set-up with socket2: no Nagle, large buffers, reusable listeners.

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Send and receive buffer size asked of the kernel for every socket.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Keepalive probes, so that a peer host that vanished without a reset (power
/// loss, cable) is noticed after about 25 s of silence even when we are not
/// sending.
fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3)
}

fn new_socket(addr: &SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_tcp_nodelay(true)?;
    let _ = s.set_tcp_keepalive(&keepalive());
    // The kernel may clamp the sizes (net.core.*mem_max): not an error.
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    Ok(s)
}

/// Binds a listener (SO_REUSEADDR, large buffers inherited by accepted
/// sockets). Must be called inside the runtime context.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = new_socket(&addr)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    TcpListener::from_std(s.into())
}

/// Connects with the socket options set before the handshake (so that the
/// window scale matches the buffer size).
pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = new_socket(&addr)?;
    s.set_nonblocking(true)?;
    let std_stream: std::net::TcpStream = s.into();
    TcpSocket::from_std_stream(std_stream).connect(addr).await
}

/// Options for an accepted socket (the buffer sizes come from the listener).
pub fn tune_accepted(s: &TcpStream) {
    let r = SockRef::from(s);
    let _ = r.set_tcp_nodelay(true);
    let _ = r.set_tcp_keepalive(&keepalive());
}
