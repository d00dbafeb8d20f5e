//! Relay cost per round trip, side by side: `voxa relay`, optionally an older voxa binary
//! (`VOXA_BENCH_BASELINE=path/to/voxa`), the floor (a byte forwarder with the same pairing and no
//! WebSocket parsing, floor.rs), and a Node.js relay on `ws` (benches/node_relay.js, its `ws`
//! installed by npm into a temporary directory; skipped with a note without npm). Each relay runs
//! pinned to core 0 and the load generator to core 1; the figures are the relay process's own CPU
//! time (utime + stime from /proc/<pid>/stat) per round trip of a 32 B frame, binary and text
//! (voxa's sessions are JSON text), the round-trip p50/p99, rounds waited (a fairness figure the
//! machine's load does not move: see `Figures`), how often the relay and the generator were
//! preempted, and the relay's RSS once the load's pairs have joined, at 1 pair, 100 pairs × 4
//! frames in flight, and 1000 pairs. Each figure is the median of several runs, every relay
//! measured in each run. voxa and the Node relay speak the
//! relay framing to the agent side (docs/PROTOCOL.md, "Relay"); the floor forwards bytes as they
//! are, so the generator's agent side echoes what each one sends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use voxa::protocol::relay::{self as relay_framing, Kind};

use crate::floor;
use crate::relay::{raw_socket, RelayProcess};
use crate::report::{percentiles, status_kib, Report};

const AREA: &str = "relay CPU";
const FRAME: usize = 32;
/// (pairs, frames in flight per pair)
const LOADS: [(usize, usize); 3] = [(1, 1), (100, 4), (1000, 1)];
/// The frame kinds measured: binary and text (WebSocket opcodes).
const KINDS: [(u8, &str); 2] = [(OP_BINARY, "binary"), (OP_TEXT, "text")];
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const WARM_UP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(2);
const RELAY_CORE: usize = 0;
const GENERATOR_CORE: usize = 1;

/// A relay implementation under test.
struct Contender {
    name: String,
    command: Vec<String>,
    env: Vec<(String, String)>,
    /// It speaks the relay framing on the agent's socket (the floor does not).
    framed: bool,
}

/// One run's figures for one relay and load.
#[derive(Clone, Copy, Default)]
struct Figures {
    cpu_us_per_round_trip: f64,
    /// The part of it spent in the kernel (system calls, loopback TCP).
    system_us_per_round_trip: f64,
    p50_us: f64,
    p99_us: f64,
    /// Round trips of every pair that completed while one was in flight (itself included), over
    /// the frames in flight: 1.0 when the relay serves its sockets in turn, whatever the machine's
    /// load does to the wall-clock figures.
    p50_rounds: f64,
    p99_rounds: f64,
    /// Round trips of the pair that completed fewest in the window, over the median pair's: a
    /// few sockets held back on every frame complete few round trips, so no percentile of the
    /// round trips shows them, but this does.
    slowest_pair: f64,
    round_trips_per_s: f64,
    /// Times per second the kernel took the core from the relay's threads, and from the load
    /// generator's, while they could still run (other processes wanting the core).
    relay_preempted_per_s: f64,
    generator_preempted_per_s: f64,
    /// Resident memory once every pair of the load has joined, and its anonymous part (heap,
    /// stacks; the rest is the binary's and libraries' pages), in KiB.
    rss_kib: f64,
    anon_kib: f64,
}

pub fn run(report: &mut Report, measuring: bool) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores < 2 {
        eprintln!("relay CPU bench skipped: it pins the relay and the generator to two different cores");
        return;
    }
    // The generator gets a thread of its own, pinned, so the sections after this one are not.
    let rows = std::thread::scope(|scope| scope.spawn(|| generate(measuring)).join().unwrap_or_default());
    for (figure, value) in rows {
        report.add(AREA, figure, value, "");
    }
}

/// Runs every load against every contender on this thread, pinned to the generator core, and
/// returns the report rows.
fn generate(measuring: bool) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Err(err) = pin_to(GENERATOR_CORE) {
        eprintln!("relay CPU bench skipped: could not pin the generator: {err}");
        return rows;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("relay CPU bench skipped: no runtime: {err}");
            return rows;
        }
    };
    // The smoke run (`cargo test`) leaves Node out: it would install `ws` from the network.
    let node_dir = if measuring { tempfile::tempdir().ok() } else { None };
    let contenders = contenders(node_dir.as_ref().map(|dir| dir.path()), measuring);
    let runs = std::env::var("VOXA_BENCH_RUNS").ok().and_then(|runs| runs.parse().ok());
    let runs = if measuring { runs.unwrap_or(5) } else { 1 };
    let loads = if measuring { chosen_loads() } else { LOADS[..1].to_vec() };
    for (&(pairs, in_flight), &(opcode, kind)) in
        loads.iter().flat_map(|load| KINDS.iter().map(move |kind| (load, kind)))
    {
        let mut all: Vec<Vec<Figures>> = vec![Vec::new(); contenders.len()];
        for _ in 0..runs {
            for (contender, figures) in contenders.iter().zip(&mut all) {
                match runtime.block_on(measure(contender, Load { pairs, in_flight, opcode }, measuring)) {
                    Ok(run) => figures.push(run),
                    Err(err) => {
                        eprintln!("relay CPU bench failed for {}: {err:#}", contender.name);
                        std::process::exit(1);
                    }
                }
            }
        }
        let load = if in_flight == 1 { format!("{pairs} pair(s)") } else { format!("{pairs} pairs × {in_flight}") };
        let cells: Vec<String> = contenders
            .iter()
            .zip(&all)
            .map(|(contender, figures)| {
                let median = |pick: fn(&Figures) -> f64| {
                    let mut values: Vec<f64> = figures.iter().map(pick).collect();
                    percentiles(&mut values).0
                };
                format!(
                    "{}: {:.1} µs CPU ({:.1} in the kernel), p50 {:.0} µs, p99 {:.0} µs, \
                     rounds waited p50 {:.2} p99 {:.2}, slowest pair {:.2} of the median, {:.0}k rt/s, preempted {:.0}/s (generator {:.0}/s), \
                     RSS {:.1} MiB ({:.1} anonymous)",
                    contender.name,
                    median(|f| f.cpu_us_per_round_trip),
                    median(|f| f.system_us_per_round_trip),
                    median(|f| f.p50_us),
                    median(|f| f.p99_us),
                    median(|f| f.p50_rounds),
                    median(|f| f.p99_rounds),
                    median(|f| f.slowest_pair),
                    median(|f| f.round_trips_per_s) / 1000.0,
                    median(|f| f.relay_preempted_per_s),
                    median(|f| f.generator_preempted_per_s),
                    median(|f| f.rss_kib) / 1024.0,
                    median(|f| f.anon_kib) / 1024.0,
                )
            })
            .collect();
        rows.push((format!("32 B {kind} round trip, {load}, relay on one core (median of {runs})"), cells.join("; ")));
    }
    rows
}

/// The loads to measure: all of them, or those `VOXA_BENCH_LOADS` names (`100x4,1000x1`).
fn chosen_loads() -> Vec<(usize, usize)> {
    let Ok(names) = std::env::var("VOXA_BENCH_LOADS") else { return LOADS.to_vec() };
    let chosen: Vec<(usize, usize)> = LOADS
        .iter()
        .copied()
        .filter(|(pairs, in_flight)| names.split(',').any(|name| name.trim() == format!("{pairs}x{in_flight}")))
        .collect();
    if chosen.is_empty() {
        eprintln!("VOXA_BENCH_LOADS names none of 1x1, 100x4, 1000x1: measuring them all");
        return LOADS.to_vec();
    }
    chosen
}

fn contenders(node_dir: Option<&Path>, measuring: bool) -> Vec<Contender> {
    let voxa = |name: &str, binary: &str| Contender {
        name: name.to_owned(),
        command: [binary, "relay", "--listen", "127.0.0.1:0", "--json", "--max-connections-per-ip", "0"]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        framed: true,
    };
    let mut contenders = vec![voxa("voxa", env!("CARGO_BIN_EXE_voxa"))];
    if let Some(baseline) = std::env::var_os("VOXA_BENCH_BASELINE") {
        contenders.push(voxa("baseline", &baseline.to_string_lossy()));
    }
    match std::env::current_exe() {
        Ok(bench) => contenders.push(Contender {
            name: "floor".to_owned(),
            command: vec![bench.display().to_string(), floor::ARG.to_owned()],
            env: Vec::new(),
            framed: false,
        }),
        Err(err) => eprintln!("relay CPU bench: no floor forwarder: {err}"),
    }
    match node_dir.map(install_ws) {
        Some(Ok(modules)) => contenders.push(Contender {
            name: "node+ws".to_owned(),
            command: vec!["node".to_owned(), node_script().display().to_string()],
            env: vec![("NODE_PATH".to_owned(), modules.display().to_string())],
            framed: true,
        }),
        Some(Err(note)) => eprintln!("relay CPU bench: no Node relay: {note}"),
        None if measuring => eprintln!("relay CPU bench: no Node relay: no temporary directory"),
        None => {}
    }
    contenders
}

fn node_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches").join("node_relay.js")
}

/// Installs `ws` into `dir` with npm and returns its `node_modules`.
fn install_ws(dir: &Path) -> Result<PathBuf, String> {
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(dir)
        .arg("ws@8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|err| format!("npm unavailable ({err})"))?;
    if !installed.success() {
        return Err(format!("npm install ws failed ({installed})"));
    }
    Ok(dir.join("node_modules"))
}

/// Pins the calling thread (and the threads it starts afterwards) to one core.
fn pin_to(core: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(core);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

/// Starts a contender pinned to the relay core.
fn spawn_pinned(contender: &Contender) -> anyhow::Result<RelayProcess> {
    let mut command = Command::new("taskset");
    command.args(["-c", &RELAY_CORE.to_string()]).args(&contender.command);
    command.envs(contender.env.iter().map(|(k, v)| (k, v)));
    RelayProcess::start(command)
}

/// CPU time a process has used, in microseconds: (user + system, system).
fn cpu_us(relay: &RelayProcess) -> anyhow::Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", relay.child.id()))?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (user, system): (u64, u64) = (fields[11].parse()?, fields[12].parse()?);
    let per_tick = 1e6 / rustix::param::clock_ticks_per_second() as f64;
    Ok(((user + system) as f64 * per_tick, system as f64 * per_tick))
}

/// Involuntary context switches of every thread of a process so far.
fn preempted(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks.flatten().map(|task| involuntary_switches(&task.path().join("status"))).sum()
}

/// Involuntary context switches of the calling thread (the load generator) so far.
fn preempted_here() -> u64 {
    involuntary_switches(Path::new("/proc/thread-self/status"))
}

fn involuntary_switches(status: &Path) -> u64 {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("nonvoluntary_ctxt_switches:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

fn code(n: usize) -> String {
    format!("{:032x}", 0xc0de_0000_0000_0000_0000_0000_0000_0000u128 + n as u128)
}

/// Appends a client frame (zero mask) carrying `payload`, under 126 bytes.
fn push_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    out.push(0x80 | opcode);
    out.push(0x80 | payload.len() as u8);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(payload);
}

/// Reads server frames and calls `each(opcode, payload)` for every complete one.
struct FrameSplitter {
    buf: Vec<u8>,
    filled: usize,
}

impl FrameSplitter {
    fn new() -> Self {
        FrameSplitter { buf: vec![0u8; 64 << 10], filled: 0 }
    }

    async fn read(&mut self, io: &mut OwnedReadHalf, mut each: impl FnMut(u8, &[u8])) -> anyhow::Result<()> {
        let n = io.read(&mut self.buf[self.filled..]).await?;
        anyhow::ensure!(n > 0, "relay closed the socket");
        self.filled += n;
        let mut at = 0;
        while self.filled - at >= 2 {
            let (len, mut header) = match self.buf[at + 1] & 0x7F {
                126 if self.filled - at >= 4 => (u16::from_be_bytes([self.buf[at + 2], self.buf[at + 3]]) as usize, 4),
                126 | 127 => break,
                short => (short as usize, 2),
            };
            // The floor forwarder passes the generator's frames on still masked (with zeros).
            if self.buf[at + 1] & 0x80 != 0 {
                header += 4;
            }
            if self.filled - at < header + len {
                break;
            }
            each(self.buf[at] & 0x0F, &self.buf[at + header..at + header + len]);
            at += header + len;
        }
        self.buf.copy_within(at..self.filled, 0);
        self.filled -= at;
        Ok(())
    }
}

/// The laptop side: sends every phone's frame back as it came. Through a relay that speaks the
/// relay framing each is a binary message with the relay's header (TEXT or BINARY and the phone),
/// which goes back as it came; the floor hands over the phone's frames themselves (its notices,
/// text starting with U+0001, are skipped).
async fn echo(mut read: OwnedReadHalf, mut write: OwnedWriteHalf, framed: bool) -> anyhow::Result<()> {
    let mut frames = FrameSplitter::new();
    let mut out = Vec::with_capacity(4096);
    loop {
        frames
            .read(&mut read, |opcode, payload| {
                let data = if framed {
                    opcode == OP_BINARY
                        && relay_framing::split(payload)
                            .is_some_and(|(kind, _, _)| matches!(kind, Kind::Text | Kind::Binary))
                } else {
                    opcode == OP_BINARY || (opcode == OP_TEXT && !relay_framing::is_notice(payload))
                };
                if data {
                    push_frame(&mut out, opcode, payload);
                }
            })
            .await?;
        if !out.is_empty() {
            write.write_all(&out).await?;
            out.clear();
        }
    }
}

/// Shared counters of a run.
struct Tally {
    round_trips: AtomicU64,
    recording: AtomicBool,
    /// Each recorded round trip: (microseconds, round trips completed meanwhile).
    samples: Mutex<Vec<(f64, u64)>>,
    /// Round trips each pair completed while recording.
    per_pair: Vec<AtomicU64>,
    epoch: Instant,
}

/// A load: pairs, frames in flight per pair, and the frames' opcode.
#[derive(Clone, Copy)]
struct Load {
    pairs: usize,
    in_flight: usize,
    opcode: u8,
}

/// The payload of a phone's frame ([`FRAME`] bytes of hex digits, so valid UTF-8 either way): its
/// send time in nanoseconds and the round trips every pair had completed by then.
fn stamp(tally: &Tally) -> [u8; FRAME] {
    let nanos = tally.epoch.elapsed().as_nanos() as u64;
    let done = tally.round_trips.load(Ordering::Relaxed);
    let mut payload = [0u8; FRAME];
    payload.copy_from_slice(format!("{nanos:016x}{done:016x}").as_bytes());
    payload
}

/// A returning frame's (send time, round trips completed before it left).
fn stamped(payload: &[u8]) -> Option<(u64, u64)> {
    let hex =
        |range: std::ops::Range<usize>| u64::from_str_radix(std::str::from_utf8(payload.get(range)?).ok()?, 16).ok();
    Some((hex(0..16)?, hex(16..32)?))
}

/// The phone side: keeps `in_flight` frames going, each stamped with its send time.
async fn phone(
    mut read: OwnedReadHalf,
    mut write: OwnedWriteHalf,
    load: Load,
    tally: Arc<Tally>,
    pair: usize,
) -> anyhow::Result<()> {
    let mut out = Vec::with_capacity(64 * load.in_flight);
    for _ in 0..load.in_flight {
        push_frame(&mut out, load.opcode, &stamp(&tally));
    }
    write.write_all(&out).await?;
    let mut frames = FrameSplitter::new();
    let mut rtts = Vec::new();
    loop {
        out.clear();
        rtts.clear();
        frames
            .read(&mut read, |opcode, payload| {
                if let (true, Some((sent, done))) = (opcode == load.opcode && payload.len() == FRAME, stamped(payload))
                {
                    let micros = (tally.epoch.elapsed().as_nanos() as u64).saturating_sub(sent) as f64 / 1000.0;
                    rtts.push((micros, tally.round_trips.load(Ordering::Relaxed).saturating_sub(done)));
                }
            })
            .await?;
        if rtts.is_empty() {
            continue;
        }
        // Counted before the next frames are stamped, so a frame's count starts after its own.
        tally.round_trips.fetch_add(rtts.len() as u64, Ordering::Relaxed);
        if tally.recording.load(Ordering::Relaxed) {
            tally.samples.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&rtts);
            tally.per_pair[pair].fetch_add(rtts.len() as u64, Ordering::Relaxed);
        }
        for _ in 0..rtts.len() {
            push_frame(&mut out, load.opcode, &stamp(&tally));
        }
        write.write_all(&out).await?;
    }
}

/// Waits for the relay's `joined` notice on a phone socket.
async fn wait_joined(tcp: &mut TcpStream) -> anyhow::Result<()> {
    let mut notice = [0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut notice)).await??;
    anyhow::ensure!(n > 2 && notice[0] & 0x0F == 0x1, "no presence notice");
    Ok(())
}

async fn measure(contender: &Contender, load: Load, measuring: bool) -> anyhow::Result<Figures> {
    let mut relay = spawn_pinned(contender)?;
    let tally = Arc::new(Tally {
        round_trips: AtomicU64::new(0),
        recording: AtomicBool::new(false),
        samples: Mutex::new(Vec::new()),
        per_pair: (0..load.pairs).map(|_| AtomicU64::new(0)).collect(),
        epoch: Instant::now(),
    });
    let mut tasks = JoinSet::new();
    let mut phones = Vec::with_capacity(load.pairs);
    for n in 0..load.pairs {
        let laptop = raw_socket(relay.addr, &format!("/agent?code={}", code(n))).await?;
        let mut handset = raw_socket(relay.addr, &format!("/ws?code={}", code(n))).await?;
        wait_joined(&mut handset).await?;
        let (read, write) = laptop.into_split();
        // The laptop's own notice (JOINED, or the floor's text) is skipped by the echo.
        tasks.spawn(echo(read, write, contender.framed));
        phones.push(handset);
    }
    let pid = relay.child.id();
    let (rss_kib, anon_kib) = (status_kib(pid, "VmRSS") as f64, status_kib(pid, "RssAnon") as f64);
    for (pair, handset) in phones.into_iter().enumerate() {
        let (read, write) = handset.into_split();
        tasks.spawn(phone(read, write, load, Arc::clone(&tally), pair));
    }
    let (warm_up, window) =
        if measuring { (WARM_UP, MEASURE) } else { (Duration::from_millis(50), Duration::from_millis(200)) };
    tokio::time::sleep(warm_up).await;
    let preempted0 = (preempted(pid), preempted_here());
    let (count0, cpu0, started) = (tally.round_trips.load(Ordering::Relaxed), cpu_us(&relay)?, Instant::now());
    tally.recording.store(true, Ordering::Relaxed);
    tokio::time::sleep(window).await;
    tally.recording.store(false, Ordering::Relaxed);
    let (count1, cpu1, elapsed) = (tally.round_trips.load(Ordering::Relaxed), cpu_us(&relay)?, started.elapsed());
    let preempted1 = (preempted(pid), preempted_here());
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    relay.stop();
    let round_trips = count1.saturating_sub(count0).max(1);
    let samples = std::mem::take(&mut *tally.samples.lock().unwrap_or_else(|e| e.into_inner()));
    anyhow::ensure!(!samples.is_empty(), "no round trip completed through {}", contender.name);
    let (p50_us, p99_us) = percentiles(&mut samples.iter().map(|(micros, _)| *micros).collect::<Vec<_>>());
    let in_flight = (load.pairs * load.in_flight) as f64;
    let mut per_pair: Vec<f64> = tally.per_pair.iter().map(|count| count.load(Ordering::Relaxed) as f64).collect();
    let median_pair = percentiles(&mut per_pair).0;
    let slowest_pair = per_pair.first().map_or(0.0, |slowest| slowest / median_pair.max(1.0));
    let (p50_rounds, p99_rounds) =
        percentiles(&mut samples.iter().map(|(_, done)| (*done + 1) as f64 / in_flight).collect::<Vec<_>>());
    Ok(Figures {
        cpu_us_per_round_trip: (cpu1.0 - cpu0.0) / round_trips as f64,
        system_us_per_round_trip: (cpu1.1 - cpu0.1) / round_trips as f64,
        p50_us,
        p99_us,
        p50_rounds,
        p99_rounds,
        slowest_pair,
        round_trips_per_s: round_trips as f64 / elapsed.as_secs_f64(),
        relay_preempted_per_s: preempted1.0.saturating_sub(preempted0.0) as f64 / elapsed.as_secs_f64(),
        generator_preempted_per_s: preempted1.1.saturating_sub(preempted0.1) as f64 / elapsed.as_secs_f64(),
        rss_kib,
        anon_kib,
    })
}
