//! `taskfold bench transports`: the transports against each other, in one
//! run: one-way latency of a small control frame (median of ping-pong
//! round trips / 2), throughput of one-sided `get`s from 64 KiB to 32 MiB
//! (median time per get), and the time of one reduction (p = 8, 8 MiB by
//! default, median of the per-repetition maximum over ranks), for TCP and
//! libfabric (`shm` and `tcp;ofi_rxm` by default). Every figure comes with
//! its ratio to the TCP transport measured in the same run.
//!
//! Each transport runs in fresh processes started by the launcher, chosen
//! through `TASKFOLD_TRANSPORT` / `TASKFOLD_FI_PROVIDER` / `TASKFOLD_FI_WAIT`
//! as an application would choose it. libfabric needs a build with the cargo
//! feature `libfabric` (`cargo build --release -p taskfold-cli --features
//! libfabric`); without it those rows fail with a clear message and TCP is
//! still measured.

use crate::launcher::{self, Launch};
use crate::sizes::{human, parse_size};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use taskfold_benches::stats::median;
use taskfold_benches::Figure;
use taskfold_transports::tcp::TcpConfig;
use taskfold_transports::{select, BufferKey, Bytes, Event, Rank, Transport};

/// Options of `bench transports`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench transports\n  taskfold bench transports --transports tcp,libfabric:shm"
)]
pub struct TransportArgs {
    /// Transports: `tcp`, `libfabric:PROVIDER` or `libfabric:PROVIDER:auto`
    /// (progress thread blocking in `fi_cq_sread`), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tcp,libfabric:shm,libfabric:tcp;ofi_rxm"
    )]
    pub transports: Vec<String>,
    /// Get sizes, comma-separated (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "64K,256K,1M,4M,16M,32M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Timed gets per size.
    #[arg(long, default_value_t = 20)]
    pub reps: u32,
    /// Timed ping-pong round trips.
    #[arg(long, default_value_t = 2000)]
    pub pings: u32,
    /// Bytes of a ping.
    #[arg(long, default_value_t = 64)]
    pub ping_size: usize,
    /// Ranks of the reduction.
    #[arg(long, default_value_t = 8)]
    pub np: u32,
    /// Bytes per contribution of the reduction (K, M, G suffixes).
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub reduce_size: usize,
    /// Timed reductions.
    #[arg(long, default_value_t = 10)]
    pub reduce_reps: u32,
    /// Also write the figures to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Internal: run as one rank of the point-to-point job, writing the
    /// figures (rank 0) to this file.
    #[arg(long, hide = true)]
    pub as_rank: Option<PathBuf>,
}

/// Point-to-point figures of one transport (written by rank 0).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct P2p {
    /// Median one-way latency of a ping, seconds.
    pub latency_s: f64,
    /// Per get size: (bytes, median seconds per get).
    pub gets: Vec<(usize, f64)>,
}

/// All figures of one transport.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Row {
    /// The transport (`tcp`, `libfabric:shm`, ...).
    pub transport: String,
    /// Point-to-point figures, if the run succeeded.
    pub p2p: Option<P2p>,
    /// The reduction, if the run succeeded.
    pub reduce: Option<Figure>,
}

fn env_of(transport: &str) -> Result<Vec<(String, String)>, String> {
    let mut parts = transport.splitn(2, ':');
    match (parts.next(), parts.next()) {
        (Some("tcp"), None) => Ok(vec![("TASKFOLD_TRANSPORT".into(), "tcp".into())]),
        (Some("libfabric"), Some(rest)) => {
            let (prov, wait) = match rest.strip_suffix(":auto") {
                Some(p) => (p, "auto"),
                None => (rest, "poll"),
            };
            Ok(vec![
                ("TASKFOLD_TRANSPORT".into(), "libfabric".into()),
                ("TASKFOLD_FI_PROVIDER".into(), prov.into()),
                ("TASKFOLD_FI_WAIT".into(), wait.into()),
            ])
        }
        _ => Err(format!(
            "unknown transport {transport:?}: expected tcp or libfabric:PROVIDER[:auto]"
        )),
    }
}

fn launch(
    exe: &Path,
    ranks: u32,
    args: Vec<String>,
    env: Vec<(String, String)>,
) -> Result<(), String> {
    let l = Launch {
        ranks,
        program: exe.as_os_str().to_owned(),
        args: args.into_iter().map(Into::into).collect(),
        timeout: Some(Duration::from_secs(600)),
        env,
        log: None,
        respawn: 0,
    };
    match launcher::run(&l) {
        Ok(exits) if exits.iter().all(|e| e.success()) => Ok(()),
        Ok(exits) => Err(format!(
            "ranks failed: {:?}",
            exits
                .iter()
                .filter(|e| !e.success())
                .map(|e| e.rank)
                .collect::<Vec<_>>()
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn read_json<T: for<'a> Deserialize<'a>>(path: &Path) -> Result<T, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = std::fs::remove_file(path);
    serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", path.display()))
}

fn measure(exe: &Path, transport: &str, args: &TransportArgs) -> Row {
    let mut row = Row {
        transport: transport.to_string(),
        p2p: None,
        reduce: None,
    };
    let env = match env_of(transport) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return row;
        }
    };
    let tmp = std::env::temp_dir();
    let tag = format!(
        "{}-{}",
        std::process::id(),
        transport.replace([':', ';'], "_")
    );
    let out = tmp.join(format!("taskfold-bench-p2p-{tag}.json"));
    let sizes: Vec<String> = args.size.iter().map(|s| s.to_string()).collect();
    let p2p_args = vec![
        "bench".into(),
        "transports".into(),
        "--as-rank".into(),
        out.display().to_string(),
        "--size".into(),
        sizes.join(","),
        "--reps".into(),
        args.reps.to_string(),
        "--pings".into(),
        args.pings.to_string(),
        "--ping-size".into(),
        args.ping_size.to_string(),
    ];
    eprintln!("bench: {transport}: latency and gets (2 ranks)");
    match launch(exe, 2, p2p_args, env.clone()).and_then(|()| read_json::<P2p>(&out)) {
        Ok(p) => row.p2p = Some(p),
        Err(e) => eprintln!("bench: {transport}: point-to-point run failed: {e}"),
    }
    let out = tmp.join(format!("taskfold-bench-reduce-{tag}.json"));
    let reduce_args = vec![
        "bench-rank".into(),
        "--sizes".into(),
        args.reduce_size.to_string(),
        "--reps".into(),
        args.reduce_reps.to_string(),
        "--warmup".into(),
        "2".into(),
        "--out".into(),
        out.display().to_string(),
        "--values".into(),
        "in-place".into(),
    ];
    eprintln!(
        "bench: {transport}: reduction of {} over {} ranks",
        human(args.reduce_size as f64),
        args.np
    );
    match launch(exe, args.np, reduce_args, env).and_then(|()| read_json::<Vec<Figure>>(&out)) {
        Ok(mut f) => row.reduce = f.pop(),
        Err(e) => eprintln!("bench: {transport}: reduction run failed: {e}"),
    }
    row
}

fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && x.is_finite() => format!("{:.2}", x / b),
        _ => "-".into(),
    }
}

fn print(rows: &[Row], args: &TransportArgs) {
    let base = rows.iter().find(|r| r.transport == "tcp");
    println!(
        "\nOne-way latency of a {} B control frame (median of {} round trips / 2); ratio = time / TCP's",
        args.ping_size, args.pings
    );
    println!("{:<26} {:>12} {:>8}", "transport", "latency", "ratio");
    let base_lat = base.and_then(|b| b.p2p.as_ref()).map(|p| p.latency_s);
    for r in rows {
        match &r.p2p {
            Some(p) => println!(
                "{:<26} {:>10.1}us {:>8}",
                r.transport,
                p.latency_s * 1e6,
                ratio(p.latency_s, base_lat)
            ),
            None => println!("{:<26} {:>12}", r.transport, "failed"),
        }
    }
    println!(
        "\nOne-sided get (median of {} per size): GiB/s; ratio = throughput / TCP's",
        args.reps
    );
    print!("{:<26}", "transport");
    for s in &args.size {
        print!(" {:>15}", human(*s as f64));
    }
    println!();
    for r in rows {
        print!("{:<26}", r.transport);
        for (i, &s) in args.size.iter().enumerate() {
            let t = r.p2p.as_ref().and_then(|p| p.gets.get(i)).map(|g| g.1);
            let b = base
                .and_then(|b| b.p2p.as_ref())
                .and_then(|p| p.gets.get(i))
                .map(|g| g.1);
            match t {
                Some(t) => {
                    let gib = s as f64 / t / (1u64 << 30) as f64;
                    // Throughput ratio = TCP's time / this time.
                    let rt = b.map(|b| b / t);
                    print!(
                        " {:>7.2} ({:>5})",
                        gib,
                        rt.map_or("-".into(), |x| format!("{x:.2}"))
                    );
                }
                None => print!(" {:>15}", "-"),
            }
        }
        println!();
    }
    println!(
        "\nReduction of {} per rank over {} ranks (median of {}, max over ranks); ratio = time / TCP's",
        human(args.reduce_size as f64),
        args.np,
        args.reduce_reps
    );
    println!("{:<26} {:>12} {:>8}", "transport", "time", "ratio");
    let base_red = base.and_then(|b| b.reduce.as_ref()).map(|f| f.median_s);
    for r in rows {
        match &r.reduce {
            Some(f) => println!(
                "{:<26} {:>10.1}ms {:>8}",
                r.transport,
                f.median_s * 1e3,
                ratio(f.median_s, base_red)
            ),
            None => println!("{:<26} {:>12}", r.transport, "failed"),
        }
    }
}

/// Runs the benchmark (or, with `--as-rank`, one rank of it).
pub fn main(args: TransportArgs) -> ExitCode {
    if let Some(out) = &args.as_rank {
        return match rank_main(&args, out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench transports rank: {e}");
                ExitCode::from(1)
            }
        };
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let rows: Vec<Row> = args
        .transports
        .iter()
        .map(|t| measure(&exe, t, &args))
        .collect();
    print(&rows, &args);
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&rows).unwrap_or_default()) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if rows.iter().all(|r| r.p2p.is_some() && r.reduce.is_some()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Wakes the thread blocked in [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on this thread (the transports complete gets from their
/// own threads).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The next frame from `peer` (launcher reports and other events skipped).
fn recv_from(t: &dyn Transport, peer: Rank) -> Result<Bytes, String> {
    let rx = t.events();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Event::Message { from, frame }) if from == peer => return Ok(frame),
            Ok(Event::Message { .. } | Event::Replacement { .. }) => {}
            Ok(Event::LinkDown { peer, reason }) => {
                return Err(format!("link to rank {} down: {reason}", peer.0))
            }
            Err(_) => return Err("no frame within 60 s".into()),
        }
    }
}

fn rank_main(args: &TransportArgs, out: &Path) -> Result<(), String> {
    let settings = taskfold::Settings::from_env().map_err(|e| e.to_string())?;
    let id = taskfold::env::identity(&settings.launch).map_err(|e| e.to_string())?;
    let (master, job) = taskfold::env::master(&settings.launch).map_err(|e| e.to_string())?;
    if id.size != 2 {
        return Err(format!("needs 2 ranks, not {}", id.size));
    }
    let mut tcp = TcpConfig::new(id.rank, id.size, job, master);
    tcp.auth = taskfold_transports::auth::job_auth(&settings.launch).map_err(|e| e.to_string())?;
    let t = select::start(&settings.transport, tcp).map_err(|e| e.to_string())?;
    let r = if id.rank == 0 {
        pinger(&*t, args).and_then(|p| {
            std::fs::write(out, serde_json::to_vec(&p).unwrap_or_default())
                .map_err(|e| format!("{}: {e}", out.display()))
        })
    } else {
        ponger(&*t, args)
    };
    t.shutdown();
    r
}

/// Rank 0: pings, then gets every size from rank 1.
fn pinger(t: &dyn Transport, args: &TransportArgs) -> Result<P2p, String> {
    let peer = Rank(1);
    let ready = recv_from(t, peer)?;
    if &ready[..] != b"ready" {
        return Err("rank 1 is not ready".into());
    }
    let ping = Bytes::from(vec![7u8; args.ping_size.max(1)]);
    let warm = (args.pings / 10).max(10);
    let mut lat = Vec::with_capacity(args.pings as usize);
    for i in 0..warm + args.pings {
        let t0 = Instant::now();
        t.send(peer, ping.clone()).map_err(|e| e.to_string())?;
        let back = recv_from(t, peer)?;
        let dt = t0.elapsed().as_secs_f64() / 2.0;
        if back.len() != ping.len() {
            return Err("pong of the wrong length".into());
        }
        if i >= warm {
            lat.push(dt);
        }
    }
    let mut gets = Vec::new();
    for &size in &args.size {
        let mut times = Vec::new();
        for rep in 0..2 + args.reps {
            let t0 = Instant::now();
            // A private copy on every transport (a same-node TCP get may
            // lend a view, which costs no copy): the figures compare alike.
            let b = block_on(t.get(peer, BufferKey(size as u64)))
                .map(taskfold_transports::Received::into_owned)
                .map_err(|e| e.to_string())?;
            let dt = t0.elapsed().as_secs_f64();
            if b.len() != size || b.first() != Some(&(size as u8)) {
                return Err(format!("get of {size} bytes returned other bytes"));
            }
            if rep >= 2 {
                times.push(dt);
            }
        }
        gets.push((size, median(&mut times)));
    }
    t.send(peer, Bytes::from_static(b"stop"))
        .map_err(|e| e.to_string())?;
    Ok(P2p {
        latency_s: median(&mut lat),
        gets,
    })
}

/// Rank 1: exposes the buffers, answers pings until told to stop.
fn ponger(t: &dyn Transport, args: &TransportArgs) -> Result<(), String> {
    let peer = Rank(0);
    for &size in &args.size {
        t.expose(BufferKey(size as u64), Bytes::from(vec![size as u8; size]));
    }
    t.send(peer, Bytes::from_static(b"ready"))
        .map_err(|e| e.to_string())?;
    loop {
        let f = recv_from(t, peer)?;
        if &f[..] == b"stop" {
            return Ok(());
        }
        t.send(peer, f).map_err(|e| e.to_string())?;
    }
}
