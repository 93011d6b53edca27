//! `gigas-bench bootstrap`: how long a new full node takes to start from a snapshot instead
//! of the genesis, and what writing the snapshot costs the node that writes it.
//!
//! Method:
//!
//! - **Source state, once** (cached under `--cache`): a state database with `--accounts`
//!   accounts and `--slots` nonzero slots spread over `--contracts` contracts (each with its
//!   own code), written as a genesis whose state commitment a bench key signs, then one block
//!   that puts every key into the key index (a node that ran long enough has indexed most of
//!   its keys; the index is a quarter to a half of a snapshot). Timed: the genesis write and
//!   root are the lower bound of what a node that starts from the genesis pays at this state
//!   size, before it has replayed a single diff.
//! - **Produce**: `gigas_snapshot::write_snapshot` from one read view of that database, as
//!   `--snapshot-every` does on a following node: wall and CPU seconds (the CPU it takes from
//!   following), bytes per account, per slot and per index entry.
//! - **Serve** the archive directory with nginx (Debian's `nginx-light`) on loopback, as
//!   plain files.
//! - **Bootstrap**: this process moves into a memory cgroup of `--memory-limit` (8 GiB) and
//!   runs the full node's own bootstrap (`gigas_fullnode::bootstrap`) into a fresh database:
//!   the manifest, then chunks fetched, checked and written, then the trie and root built,
//!   timed by phase. The root it builds must be the source's.
//!
//! Must not: re-implement any part of producing, checking or writing a snapshot.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_consensus::Header;
use alloy_primitives::{keccak256, Address, Bytes, B256, KECCAK256_EMPTY, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use eyre::{bail, eyre, Result, WrapErr};
use gigas_primitives::machine::Machine;
use gigas_primitives::{AccountState, ChangeSet, LatticeHash};
use gigas_statedb::{
    BlockToApply, GenesisBlock, GenesisEntry, StateDb, StateDbOptions, WriterOptions,
};
use gigas_statediff::{commitment_digest, StateCommitment, StateKey};
use rayon::prelude::*;
use serde::Serialize;

use crate::{build_profile, write_report, Table};

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct BootstrapArgs {
    /// Accounts in the state.
    #[arg(long, default_value_t = 10_000_000)]
    pub accounts: u64,
    /// Nonzero slots in the state (the mix state: 10M accounts and 10M slots).
    #[arg(long, default_value_t = 0)]
    pub slots: u64,
    /// Contracts the slots are spread over (each its own code).
    #[arg(long, default_value_t = 1000)]
    pub contracts: u64,
    /// Put every key in the key index (as on a node that ran long).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub indexed: bool,
    /// The bootstrapping process's memory limit (a cgroup).
    #[arg(long, value_parser = gigas_cgroup::parse_size, default_value = "8GiB")]
    pub memory_limit: u64,
    /// Chunks fetched at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// A chunk's payload, uncompressed.
    #[arg(long, value_parser = gigas_cgroup::parse_size, default_value = "4MiB")]
    pub chunk_size: u64,
    /// Where the source state and its snapshot are kept between runs.
    #[arg(long, default_value = "target/bench-bootstrap")]
    pub cache: PathBuf,
    /// Where the report goes.
    #[arg(long, default_value = "reports/bootstrap")]
    pub out: PathBuf,
}

/// Writing the source state.
#[derive(Debug, Clone, Serialize)]
pub struct SourceFigures {
    /// Accounts.
    pub accounts: u64,
    /// Nonzero slots.
    pub slots: u64,
    /// Key-index entries.
    pub index_len: u64,
    /// Seconds to write the genesis and build its root (the replay baseline's lower bound).
    pub genesis_seconds: f64,
    /// Seconds to index every key (one block).
    pub index_seconds: f64,
    /// Whether it came from the cache (then the seconds are the first run's).
    pub cached: bool,
}

/// Producing the snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct ProduceFigures {
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of this process meanwhile (what it takes from a following node).
    pub cpu_seconds: f64,
    /// Chunks.
    pub chunks: u32,
    /// Bytes of every file.
    pub bytes: u64,
    /// Bytes on the wire per account (account chunks only).
    pub bytes_per_account: f64,
    /// Per slot.
    pub bytes_per_slot: f64,
    /// Per key-index entry.
    pub bytes_per_index_entry: f64,
    /// The manifest's bytes.
    pub manifest_bytes: u64,
}

/// The bootstrap.
#[derive(Debug, Clone, Serialize)]
pub struct BootstrapFigures {
    /// The full node's own report (phases, bytes, refusals).
    pub report: gigas_fullnode::bootstrap::BootstrapReport,
    /// Wall seconds from the start to the head recorded.
    pub total_seconds: f64,
    /// The cgroup's accounting at the end.
    pub peak_bytes: u64,
    /// Major faults in the cgroup.
    pub major_faults: u64,
    /// The root equals the source's.
    pub root_matches: bool,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct BootstrapReportFile {
    /// Release or debug.
    pub build: &'static str,
    /// The machine.
    pub machine: Machine,
    /// Chunk size, concurrency, memory limit.
    pub chunk_bytes: u64,
    /// Chunks in flight.
    pub concurrency: usize,
    /// The cgroup limit.
    pub memory_limit: u64,
    /// The source state.
    pub source: SourceFigures,
    /// Producing the snapshot.
    pub produce: ProduceFigures,
    /// Bootstrapping from it.
    pub bootstrap: BootstrapFigures,
    /// The issue's target for this state, seconds.
    pub target_seconds: f64,
}

fn address(i: u64) -> Address {
    Address::from_word(keccak256(i.to_be_bytes()))
}

fn contract(c: u64) -> Address {
    Address::from_word(keccak256(
        [b"contract".as_slice(), &c.to_be_bytes()].concat(),
    ))
}

fn code_of(c: u64) -> Bytes {
    let mut code = vec![0x60, 0x00, 0x54, 0x60, 0x01, 0x55];
    code.extend_from_slice(&c.to_be_bytes());
    code.push(0x00);
    Bytes::from(code)
}

fn account_of(i: u64) -> AccountState {
    AccountState {
        nonce: i % 7,
        balance: U256::from(1_000_000_007u64.wrapping_mul(i + 1)) * U256::from(1_000_000_000u64),
        code_hash: KECCAK256_EMPTY,
    }
}

/// Slot `n`: in contract `n mod contracts`, at a slot drawn from keccak (as a mapping's
/// slots are, so that no two contracts share slot keys and a snapshot's hashed slots do
/// not repeat), holding a token balance's worth (about 10^15 to 10^22: 7 to 9 bytes).
fn slot_of(n: u64, contracts: u64) -> (Address, U256, U256) {
    let c = n % contracts;
    let slot = U256::from_be_bytes(keccak256([b"slot".as_slice(), &n.to_be_bytes()].concat()).0);
    (
        contract(c),
        slot,
        U256::from(n + 1) * U256::from(1_000_000_000_000_000u64),
    )
}

fn sum_state(args: &BootstrapArgs) -> LatticeHash {
    let add = |mut a: LatticeHash, b: LatticeHash| {
        a.add(&b);
        a
    };
    let accounts = (0..args.accounts)
        .into_par_iter()
        .fold(LatticeHash::zero, |mut s, i| {
            s.add(&LatticeHash::account(&address(i), &account_of(i)));
            s
        })
        .reduce(LatticeHash::zero, add);
    let contracts = (0..args.contracts.min(args.slots.max(1)))
        .into_par_iter()
        .fold(LatticeHash::zero, |mut s, c| {
            let state = AccountState {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: keccak256(code_of(c)),
            };
            s.add(&LatticeHash::account(&contract(c), &state));
            s
        })
        .reduce(LatticeHash::zero, add);
    let slots = (0..args.slots)
        .into_par_iter()
        .fold(LatticeHash::zero, |mut s, n| {
            let (a, slot, value) = slot_of(n, args.contracts.max(1));
            s.add_slot(&a, &slot, &value);
            s
        })
        .reduce(LatticeHash::zero, add);
    add(add(accounts, contracts), slots)
}

/// The source state's Ethereum state root, as the sequencer signs it at genesis: its hashed
/// leaves written into a trie store in `scratch` (removed after) and the trie rebuilt there.
fn state_root(args: &BootstrapArgs, scratch: &std::path::Path) -> Result<B256> {
    let contracts = args.contracts.max(1);
    let mut accounts: Vec<(B256, AccountState)> = (0..args.accounts)
        .into_par_iter()
        .map(|i| (keccak256(address(i)), account_of(i)))
        .collect();
    accounts.extend((0..contracts.min(args.slots.max(1))).map(|c| {
        (
            keccak256(contract(c)),
            AccountState {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: keccak256(code_of(c)),
            },
        )
    }));
    let slots: Vec<(B256, B256, U256)> = (0..args.slots)
        .into_par_iter()
        .map(|n| {
            let (a, slot, value) = slot_of(n, contracts);
            (keccak256(a), keccak256(slot.to_be_bytes::<32>()), value)
        })
        .collect();
    let mut store = gigas_triedb::TrieStore::open(
        scratch,
        gigas_triedb::TrieStoreOptions {
            sparse_trie_bytes: 0,
            ..gigas_triedb::TrieStoreOptions::default()
        },
    )?;
    let root = store.reset(0, accounts, slots)?.root;
    drop(store);
    std::fs::remove_dir_all(scratch).wrap_err_with(|| format!("removing {}", scratch.display()))?;
    Ok(root)
}

fn keys(args: &BootstrapArgs) -> Vec<StateKey> {
    let mut keys: Vec<StateKey> = (0..args.accounts)
        .map(|i| StateKey::Account(address(i)))
        .collect();
    let contracts = args.contracts.max(1);
    keys.extend((0..args.slots).map(|n| {
        let (a, slot, _) = slot_of(n, contracts);
        StateKey::Slot(a, slot)
    }));
    keys
}

struct Signed {
    signature: alloy_primitives::Signature,
    commitment: StateCommitment,
}

fn sign(key: &PrivateKeySigner, hash: &B256, lattice: &LatticeHash) -> Result<Signed> {
    let checksum = lattice.checksum();
    Ok(Signed {
        signature: key.sign_hash_sync(hash)?,
        commitment: StateCommitment {
            lattice: checksum,
            signature: key.sign_hash_sync(&commitment_digest(hash, &checksum))?,
        },
    })
}

fn bench_key() -> Result<PrivateKeySigner> {
    Ok(PrivateKeySigner::from_bytes(&keccak256(
        b"gigas-bench bootstrap",
    ))?)
}

/// Writes the source state (or finds it cached) and returns its figures.
fn source(args: &BootstrapArgs, dir: &Path) -> Result<SourceFigures> {
    let done = dir.join("source.json");
    if let Ok(bytes) = std::fs::read(&done) {
        let mut figures: SourceFigures = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                Some(SourceFigures {
                    accounts: v.get("accounts")?.as_u64()?,
                    slots: v.get("slots")?.as_u64()?,
                    index_len: v.get("index_len")?.as_u64()?,
                    genesis_seconds: v.get("genesis_seconds")?.as_f64()?,
                    index_seconds: v.get("index_seconds")?.as_f64()?,
                    cached: true,
                })
            })
            .ok_or_else(|| eyre!("{} is unreadable; delete it", done.display()))?;
        figures.cached = true;
        eprintln!("source state cached in {}", dir.display());
        return Ok(figures);
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).wrap_err_with(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("state"))?;
    let key = bench_key()?;
    eprintln!("summing the source state's lattice hash");
    let lattice = sum_state(args);
    eprintln!("computing the source state's root");
    let header = Header {
        number: 0,
        gas_limit: 30_000_000,
        state_root: state_root(args, &dir.join("root-scratch"))?,
        ..Header::default()
    };
    let hash = header.hash_slow();
    let signed = sign(&key, &hash, &lattice)?;
    let db = StateDb::open(&dir.join("state"), StateDbOptions::default())?;
    let contracts = args.contracts.max(1);
    let entries = (0..args.accounts)
        .map(|i| {
            let state = account_of(i);
            GenesisEntry::Account {
                address: address(i),
                nonce: state.nonce,
                balance: state.balance,
                code: None,
            }
        })
        .chain(
            (0..contracts.min(args.slots.max(1))).map(|c| GenesisEntry::Account {
                address: contract(c),
                nonce: 1,
                balance: U256::ZERO,
                code: Some(code_of(c)),
            }),
        )
        .chain((0..args.slots).map(|n| {
            let (address, slot, value) = slot_of(n, contracts);
            GenesisEntry::Slot {
                address,
                slot,
                value,
            }
        }))
        .map(Ok::<_, std::convert::Infallible>);
    eprintln!(
        "writing the source genesis ({} accounts, {} slots)",
        args.accounts, args.slots
    );
    let started = Instant::now();
    db.apply_genesis(
        GenesisBlock {
            header: &header,
            hash,
            signature: Some(signed.signature),
            commitment: Some(signed.commitment),
            verify_root: true,
        },
        entries,
        1 << 20,
    )?;
    let genesis_seconds = started.elapsed().as_secs_f64();
    eprintln!("genesis written in {genesis_seconds:.1} s");
    let mut index_len = 0;
    let started = Instant::now();
    if args.indexed {
        let keys = keys(args);
        index_len = keys.len() as u64;
        let mut lattice = lattice;
        let sum = keys
            .par_iter()
            .enumerate()
            .fold(LatticeHash::zero, |mut s, (i, key)| {
                s.add(&match key {
                    StateKey::Account(a) => LatticeHash::index_entry(i as u64, a, None),
                    StateKey::Slot(a, slot) => LatticeHash::index_entry(i as u64, a, Some(slot)),
                });
                s
            })
            .reduce(LatticeHash::zero, |mut a, b| {
                a.add(&b);
                a
            });
        lattice.add(&sum);
        // An empty block: the state, and its root, stay the genesis'.
        let next = Header {
            number: 1,
            parent_hash: hash,
            gas_limit: 30_000_000,
            timestamp: 1,
            state_root: header.state_root,
            ..Header::default()
        };
        let next_hash = next.hash_slow();
        let signed = sign(&key, &next_hash, &lattice)?;
        let mut writer = db.writer(WriterOptions {
            root_every: 1,
            max_group_bytes: u64::MAX,
            ..WriterOptions::default()
        })?;
        writer.apply(BlockToApply {
            header: &next,
            hash: next_hash,
            signature: Some(signed.signature),
            changes: &ChangeSet::default(),
            hashed: None,
            new_keys: &keys,
            lattice: Some(&lattice),
            commitment: Some(signed.commitment),
        })?;
        writer.commit()?;
        eprintln!(
            "{index_len} keys indexed in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let figures = SourceFigures {
        accounts: args.accounts + contracts.min(args.slots.max(1)),
        slots: args.slots,
        index_len,
        genesis_seconds,
        index_seconds: started.elapsed().as_secs_f64(),
        cached: false,
    };
    std::fs::write(&done, serde_json::to_vec_pretty(&figures)?)?;
    Ok(figures)
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// nginx serving `root` as plain files on a free loopback port.
fn serve(dir: &Path, root: &Path) -> Result<(Nginx, String)> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| {
            eyre!("nginx is not installed: scripts/prerequisites.sh tests installs it")
        })?;
    let port = gigas_launch::free_port()?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    // nginx reads paths in its configuration against its prefix: give it absolute ones.
    let dir = &std::fs::canonicalize(dir)?;
    let root = &std::fs::canonicalize(root)?;
    let d = dir.display();
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    default_type application/octet-stream;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    server {{ listen 127.0.0.1:{port}; root {}; }}
}}
"#,
        root.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .wrap_err("starting nginx")?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            bail!("nginx did not listen on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((Nginx(child), format!("http://127.0.0.1:{port}")))
}

/// Runs the benchmark.
pub fn run(args: &BootstrapArgs) -> Result<()> {
    // `s2`: slots at keccak-drawn keys (the first layout put slot k of every contract at
    // the same key, which zstd found across contracts).
    let name = format!(
        "{}-{}-{}-{}-s2",
        args.accounts,
        args.slots,
        args.contracts,
        if args.indexed { "indexed" } else { "plain" }
    );
    let dir = args.cache.join(&name);
    let source = source(args, &dir.join("source"))?;
    let source_db = StateDb::open(&dir.join("source").join("state"), StateDbOptions::default())?;
    let source_root = source_db
        .view()?
        .last_root()?
        .map(|r| r.1)
        .ok_or_else(|| eyre!("the source state has no root"))?;

    // Produce, into the archive directory nginx serves.
    let archive = dir.join("archive");
    let snapshots = archive.join("snapshots");
    if snapshots.exists() {
        std::fs::remove_dir_all(&snapshots)?;
    }
    std::fs::create_dir_all(&snapshots)?;
    eprintln!("writing the snapshot");
    let options = gigas_snapshot::ProduceOptions {
        chunk_bytes: usize::try_from(args.chunk_size)?,
        ..gigas_snapshot::ProduceOptions::default()
    };
    let cpu = cpu_seconds();
    let produced = {
        let view = source_db.view()?;
        gigas_snapshot::write_snapshot(&view, &snapshots, options)?
    };
    let produce_cpu = cpu_seconds() - cpu;
    drop(source_db);
    let (manifest, _) =
        gigas_snapshot::read_manifest(&snapshots, produced.block, bench_key()?.address())?;
    let per_kind = |kind| {
        let (bytes, entries) = manifest
            .chunks
            .iter()
            .filter(|c| c.kind == kind)
            .fold((0u64, 0u64), |(b, e), c| {
                (b + u64::from(c.file_len), e + u64::from(c.entries))
            });
        if entries == 0 {
            0.0
        } else {
            bytes as f64 / entries as f64
        }
    };
    let produce = ProduceFigures {
        seconds: produced.seconds,
        cpu_seconds: produce_cpu,
        chunks: produced.chunks,
        bytes: produced.bytes,
        bytes_per_account: per_kind(gigas_snapshot::ChunkKind::Accounts),
        bytes_per_slot: per_kind(gigas_snapshot::ChunkKind::Slots),
        bytes_per_index_entry: per_kind(gigas_snapshot::ChunkKind::Index),
        manifest_bytes: std::fs::metadata(produced.dir.join("manifest"))?.len(),
    };
    eprintln!(
        "snapshot: {} chunks, {:.1} MiB in {:.1} s ({:.1} CPU s)",
        produce.chunks,
        produce.bytes as f64 / (1 << 20) as f64,
        produce.seconds,
        produce.cpu_seconds
    );

    // Serve and bootstrap, under the limit.
    let (_nginx, url) = serve(&dir.join("nginx"), &archive)?;
    let target = dir.join("bootstrapped");
    if target.exists() {
        std::fs::remove_dir_all(&target)?;
    }
    std::fs::create_dir_all(&target)?;
    let limited = crate::fullnode::Limited::enter("bench-bootstrap", args.memory_limit)?;
    let faults = limited.major_faults()?;
    let started = Instant::now();
    // As the node opens it by default (`--db.sync periodic`).
    let db = Arc::new(StateDb::open(
        &target,
        StateDbOptions {
            durability: gigas_statedb::Durability::Periodic(gigas_statedb::SyncSchedule {
                period: Duration::from_secs(1),
                bytes: 256 << 20,
                background: false,
            }),
            ..StateDbOptions::default()
        },
    )?);
    let mut config = gigas_fullnode::bootstrap::BootstrapConfig::new(vec![url]);
    config.concurrency = args.concurrency.max(1);
    config.progress_bar = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    eprintln!(
        "bootstrapping under a {} MiB limit",
        args.memory_limit >> 20
    );
    let (tip, report) = runtime
        .block_on(gigas_fullnode::bootstrap::bootstrap(
            db.clone(),
            bench_key()?.address(),
            config,
            gigas_fullnode::bootstrap::BootstrapMetrics::default(),
            stop,
        ))
        .map_err(|e| eyre!("the bootstrap failed: {e}"))?;
    let total_seconds = started.elapsed().as_secs_f64();
    let cgroup = limited.figures(faults)?;
    drop(limited);
    // The written state: every account, counted; the root, the source's.
    let mut accounts = 0u64;
    db.view()?.scan_accounts(|_, _| {
        accounts += 1;
        ControlFlow::Continue(())
    })?;
    let expected_accounts = args.accounts + args.contracts.max(1).min(args.slots.max(1));
    let mut source = source;
    source.accounts = expected_accounts;
    if accounts != expected_accounts || tip.number != produced.block {
        bail!(
            "the bootstrapped state holds {accounts} accounts at block {}, the source {} at {}",
            tip.number,
            expected_accounts,
            produced.block
        );
    }
    let bootstrap = BootstrapFigures {
        root_matches: report.state_root == source_root,
        report,
        total_seconds,
        peak_bytes: cgroup.peak_bytes,
        major_faults: cgroup.major_faults,
    };
    if !bootstrap.root_matches {
        bail!(
            "the bootstrapped root {} is not the source's {source_root}",
            bootstrap.report.state_root
        );
    }
    let file = BootstrapReportFile {
        build: build_profile(),
        machine: Machine::current(),
        chunk_bytes: args.chunk_size,
        concurrency: args.concurrency,
        memory_limit: args.memory_limit,
        target_seconds: if args.slots > 0 { 240.0 } else { 120.0 },
        source,
        produce,
        bootstrap,
    };
    let out = args.out.join(&name);
    std::fs::create_dir_all(&out)?;
    let r = &file.bootstrap.report;
    gigas_loadgen::chart::stacked_bars(
        &out.join("bootstrap.svg"),
        &format!("Bootstrap of {name} (seconds)"),
        "seconds",
        &[
            gigas_loadgen::chart::Bar {
                label: "from a snapshot".into(),
                parts: vec![
                    ("manifest".into(), r.manifest_seconds),
                    ("fetch + verify + write".into(), r.chunks_wall_seconds),
                    ("merkleize".into(), r.merkleize_seconds),
                ],
            },
            gigas_loadgen::chart::Bar {
                label: "genesis (lower bound of a replay)".into(),
                parts: vec![
                    ("manifest".into(), 0.0),
                    ("fetch + verify + write".into(), file.source.genesis_seconds),
                    ("merkleize".into(), 0.0),
                ],
            },
        ],
    )?;
    write_report(&out, "bootstrap", &file, &markdown(&file))?;
    Ok(())
}

fn markdown(f: &BootstrapReportFile) -> String {
    let r = &f.bootstrap.report;
    let mut out = format!(
        "# Bootstrap from a snapshot\n\n{} build, {}; chunks of {} KiB, {} in flight, under a {} MiB limit.\n\n",
        f.build,
        f.machine.describe(),
        f.chunk_bytes >> 10,
        f.concurrency,
        f.memory_limit >> 20
    );
    let mut t = Table::new("lr", ["", "value"]);
    let mut row = |k: &str, v: String| t.row([k.to_string(), v]);
    row("accounts", f.source.accounts.to_string());
    row("slots", f.source.slots.to_string());
    row("key-index entries", f.source.index_len.to_string());
    row("snapshot: chunks", f.produce.chunks.to_string());
    row(
        "snapshot: MiB",
        format!("{:.1}", f.produce.bytes as f64 / (1 << 20) as f64),
    );
    row(
        "bytes per account",
        format!("{:.1}", f.produce.bytes_per_account),
    );
    row("bytes per slot", format!("{:.1}", f.produce.bytes_per_slot));
    row(
        "bytes per index entry",
        format!("{:.1}", f.produce.bytes_per_index_entry),
    );
    row("produce: wall s", format!("{:.1}", f.produce.seconds));
    row(
        "produce: CPU s (taken from following)",
        format!("{:.1}", f.produce.cpu_seconds),
    );
    row(
        "bootstrap: manifest s",
        format!("{:.2}", r.manifest_seconds),
    );
    row(
        "bootstrap: chunks (fetch, verify, write) wall s",
        format!("{:.1}", r.chunks_wall_seconds),
    );
    row(
        "  fetch s (summed over requests)",
        format!("{:.1}", r.fetch_seconds),
    );
    row("  verify s (summed)", format!("{:.1}", r.verify_seconds));
    row(
        "  write s (writer thread)",
        format!("{:.1}", r.write_seconds),
    );
    row(
        "bootstrap: merkleize s",
        format!("{:.1}", r.merkleize_seconds),
    );
    row(
        "bootstrap: total s",
        format!("{:.1}", f.bootstrap.total_seconds),
    );
    row("target s", format!("{:.0}", f.target_seconds));
    row(
        "peak memory MiB (cgroup)",
        format!("{}", f.bootstrap.peak_bytes >> 20),
    );
    row("major faults", f.bootstrap.major_faults.to_string());
    row(
        "genesis write + root s (lower bound of a replay from genesis)",
        format!(
            "{:.1}{}",
            f.source.genesis_seconds,
            if f.source.cached {
                " (cached run's)"
            } else {
                ""
            }
        ),
    );
    row(
        "root matches the source's",
        f.bootstrap.root_matches.to_string(),
    );
    out.push_str(&t.to_string());
    out.push_str("\n![split](bootstrap.svg)\n");
    out
}
