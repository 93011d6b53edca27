//! `gigas-bench storage`: Vilmo against MDBX on the same batches, in the same run.
//!
//! After `shared/seeds/iavl-bench.txt`: key-values processed per second, memory and disk use,
//! over time as the store grows. The workload first loads `keys` fresh keys (32 bytes, values
//! of 72 bytes) in batches, then updates keys drawn from the Zipf-Mandelbrot distribution of
//! the Vryx devnet in batches of the same size. Every batch is committed durably to each
//! engine; the order of the engines alternates from batch to batch.

use std::path::{Path, PathBuf};
use std::time::Instant;

use eyre::{eyre, Context, Result};
use gigas_primitives::machine::{resident_bytes, Machine};
use gigas_vilmo::{Batch, Options, Vilmo};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use serde::Serialize;
use signet_libmdbx::{
    DatabaseFlags, Environment, EnvironmentFlags, Geometry, Mode, SyncMode, WriteFlags,
};

use crate::median;
use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};
use crate::Table;

/// Key length of the workload.
pub const KEY_LEN: usize = 32;
/// Value length of the workload.
pub const VALUE_LEN: usize = 72;

/// One key-value of a batch.
pub type Kv = ([u8; KEY_LEN], [u8; VALUE_LEN]);

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct StorageArgs {
    /// Distinct keys loaded before the updates start.
    #[arg(long, default_value_t = 10_000_000)]
    pub keys: u64,
    /// Key-values per batch (one durable commit each).
    #[arg(long, default_value_t = 100_000)]
    pub batch: usize,
    /// Batches of Zipf-distributed updates after the load.
    #[arg(long, default_value_t = 100)]
    pub update_batches: usize,
    /// Engines to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "vilmo,mdbx")]
    pub engines: Vec<EngineKind>,
    /// Directory for the stores (a fresh temporary directory inside it; removed afterwards
    /// unless --keep). Defaults to the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the stores after the run.
    #[arg(long)]
    pub keep: bool,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/storage")]
    pub out: PathBuf,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// A storage engine under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// gigas-vilmo.
    Vilmo,
    /// MDBX through signet-libmdbx, one durable write transaction per batch.
    Mdbx,
}

trait Engine {
    fn kind(&self) -> EngineKind;
    fn commit(&mut self, kvs: &[Kv]) -> Result<()>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn disk_bytes(&self) -> u64;
    fn memory_bytes(&self) -> Option<u64>;
}

struct VilmoEngine {
    store: Vilmo,
}

impl Engine for VilmoEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Vilmo
    }

    fn commit(&mut self, kvs: &[Kv]) -> Result<()> {
        let mut batch = Batch::with_capacity(kvs.len(), kvs.len() * (KEY_LEN + VALUE_LEN));
        for (k, v) in kvs {
            batch.put(k, v)?;
        }
        self.store.commit(batch)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(key).map(<[u8]>::to_vec))
    }

    fn disk_bytes(&self) -> u64 {
        self.store.stats().disk_bytes
    }

    fn memory_bytes(&self) -> Option<u64> {
        Some(self.store.stats().index_bytes as u64)
    }
}

struct MdbxEngine {
    env: Environment,
    dir: PathBuf,
}

impl MdbxEngine {
    fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let env = Environment::builder()
            .set_geometry(Geometry {
                size: Some(0..(64usize << 30)),
                growth_step: None,
                shrink_threshold: None,
                page_size: None,
            })
            .set_flags(EnvironmentFlags {
                mode: Mode::ReadWrite {
                    sync_mode: SyncMode::Durable,
                },
                // As reth: without it, random reads under memory pressure drag in whole
                // readahead windows.
                no_rdahead: true,
                ..Default::default()
            })
            .open(dir)
            .map_err(|e| eyre!("cannot open MDBX in {}: {e}", dir.display()))?;
        Ok(Self {
            env,
            dir: dir.to_path_buf(),
        })
    }
}

impl Engine for MdbxEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Mdbx
    }

    fn commit(&mut self, kvs: &[Kv]) -> Result<()> {
        let txn = self
            .env
            .begin_rw_unsync()
            .map_err(|e| eyre!("MDBX begin: {e}"))?;
        let db = txn
            .create_db(None, DatabaseFlags::empty())
            .map_err(|e| eyre!("MDBX table: {e}"))?;
        for (k, v) in kvs {
            txn.put(db, k, v, WriteFlags::empty())
                .map_err(|e| eyre!("MDBX put: {e}"))?;
        }
        txn.commit().map_err(|e| eyre!("MDBX commit: {e}"))?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let txn = self
            .env
            .begin_ro_unsync()
            .map_err(|e| eyre!("MDBX begin: {e}"))?;
        let db = txn.open_db(None).map_err(|e| eyre!("MDBX table: {e}"))?;
        let value: Option<Vec<u8>> = txn.get(db.dbi(), key).map_err(|e| eyre!("MDBX get: {e}"))?;
        Ok(value)
    }

    fn disk_bytes(&self) -> u64 {
        allocated_bytes(&self.dir.join("mdbx.dat"))
    }

    fn memory_bytes(&self) -> Option<u64> {
        None
    }
}

/// Bytes a file occupies on disk (blocks allocated, not its apparent length).
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// The key of workload key number `i`.
fn key_of(seed: u64, i: u64) -> [u8; KEY_LEN] {
    let mut rng = SplitMix64(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let mut key = [0u8; KEY_LEN];
    rng.fill(&mut key);
    key
}

/// One measured batch.
#[derive(Debug, Clone, Serialize)]
pub struct BatchPoint {
    /// Batch number, from 1.
    pub batch: usize,
    /// "load" or "update".
    pub phase: &'static str,
    /// Distinct key-values committed.
    pub kvs: usize,
    /// Live keys after the batch.
    pub live_keys: u64,
    /// Seconds per engine, in the order of `engines`.
    pub seconds: Vec<f64>,
    /// Disk bytes per engine after the batch.
    pub disk_bytes: Vec<u64>,
    /// Bytes of Vilmo's index after the batch, when Vilmo runs.
    pub vilmo_index_bytes: Option<u64>,
    /// Resident memory of the whole process after the batch.
    pub process_rss_bytes: Option<u64>,
}

/// Totals for one engine and phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// Engine.
    pub engine: EngineKind,
    /// "load" or "update".
    pub phase: &'static str,
    /// Key-values over seconds for the whole phase.
    pub kv_per_second: f64,
    /// Median of the per-batch rates.
    pub median_batch_kv_per_second: f64,
    /// Slowest and fastest batch rates.
    pub min_batch_kv_per_second: f64,
    /// Fastest batch rate.
    pub max_batch_kv_per_second: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct StorageReport {
    /// Machine.
    pub machine: Machine,
    /// Build profile.
    pub build_profile: &'static str,
    /// Workload.
    pub keys: u64,
    /// Batch size.
    pub batch: usize,
    /// Update batches.
    pub update_batches: usize,
    /// Zipf-Mandelbrot exponent.
    pub zipf_s: f64,
    /// Zipf-Mandelbrot offset.
    pub zipf_v: f64,
    /// Seed.
    pub seed: u64,
    /// Engines, in column order.
    pub engines: Vec<EngineKind>,
    /// Every batch.
    pub points: Vec<BatchPoint>,
    /// Rates per engine and phase.
    pub summary: Vec<PhaseSummary>,
    /// Seconds to reopen Vilmo at the end (replay, verify, rebuild the index).
    pub vilmo_reopen_seconds: Option<f64>,
    /// Vilmo index bytes per live key.
    pub vilmo_index_bytes_per_key: Option<f64>,
    /// Vilmo disk bytes over live data bytes (keys x (32 + 72)).
    pub vilmo_disk_over_live: Option<f64>,
    /// MDBX disk bytes over live data bytes.
    pub mdbx_disk_over_live: Option<f64>,
    /// Vilmo's rate over MDBX's, whole run.
    pub vilmo_over_mdbx: Option<f64>,
}

/// Runs the benchmark and writes the report.
pub fn run(args: &StorageArgs) -> Result<StorageReport> {
    if args.batch == 0 || args.keys == 0 {
        return Err(eyre!("--keys and --batch must be positive"));
    }
    let machine = Machine::current();
    let build_profile = crate::build_profile();
    let load_batches = args.keys.div_ceil(args.batch as u64) as usize;
    println!("gigas-bench storage configuration");
    println!("  workload : load {} keys of {KEY_LEN} B with values of {VALUE_LEN} B in {load_batches} batches of {}, then {} batches of {} Zipf-Mandelbrot(s = {DEVNET_S}, v = {DEVNET_V}) updates; durable commits", args.keys, args.batch, args.update_batches, args.batch);
    println!(
        "  engines  : {:?} (order alternating per batch); seed {}",
        args.engines, args.seed
    );
    println!(
        "  build    : {build_profile}; machine: {}",
        machine.describe()
    );

    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).wrap_err_with(|| format!("cannot create {}", base.display()))?;
    let work = tempfile::Builder::new()
        .prefix("gigas-bench-storage-")
        .tempdir_in(&base)
        .wrap_err_with(|| format!("cannot create a directory in {}", base.display()))?;
    println!("  data dir : {}", work.path().display());

    let vilmo_dir = work.path().join("vilmo");
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    for kind in &args.engines {
        match kind {
            EngineKind::Vilmo => engines.push(Box::new(VilmoEngine {
                store: Vilmo::open(&vilmo_dir, Options::default())?,
            })),
            EngineKind::Mdbx => {
                engines.push(Box::new(MdbxEngine::open(&work.path().join("mdbx"))?))
            }
        }
    }

    let zipf_started = Instant::now();
    let zipf = ZipfMandelbrot::new(args.keys as usize, DEVNET_S, DEVNET_V);
    tracing::info!(
        seconds = zipf_started.elapsed().as_secs_f64(),
        "Zipf-Mandelbrot table built"
    );

    let total = load_batches + args.update_batches;
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>8} [{bar:40}] {pos}/{len} batches {elapsed} (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message("storage");

    let mut rng = SplitMix64(args.seed);
    let mut points = Vec::with_capacity(total);
    let mut kvs: Vec<Kv> = Vec::with_capacity(args.batch);
    let mut loaded = 0u64;
    // A multiplier coprime with the key count scatters hot ranks over the key space.
    let scatter = 0x9E37_79B9_7F4A_7C15u64 | 1;
    for b in 0..total {
        kvs.clear();
        let phase = if b < load_batches { "load" } else { "update" };
        if phase == "load" {
            let end = (loaded + args.batch as u64).min(args.keys);
            for i in loaded..end {
                let mut value = [0u8; VALUE_LEN];
                rng.fill(&mut value);
                kvs.push((key_of(args.seed, i), value));
            }
            loaded = end;
        } else {
            for _ in 0..args.batch {
                let rank = zipf.rank(rng.next_f64()) as u64;
                let i = rank.wrapping_mul(scatter) % args.keys;
                let mut value = [0u8; VALUE_LEN];
                rng.fill(&mut value);
                kvs.push((key_of(args.seed, i), value));
            }
        }
        // Both engines get the same sorted, de-duplicated batch (the last draw of a key wins).
        kvs.reverse();
        kvs.sort_by_key(|kv| kv.0);
        kvs.dedup_by(|later, earlier| later.0 == earlier.0);

        let mut seconds = vec![0.0; engines.len()];
        let order: Vec<usize> = if b % 2 == 0 {
            (0..engines.len()).collect()
        } else {
            (0..engines.len()).rev().collect()
        };
        for i in order {
            let started = Instant::now();
            engines[i].commit(&kvs)?;
            seconds[i] = started.elapsed().as_secs_f64();
        }
        points.push(BatchPoint {
            batch: b + 1,
            phase,
            kvs: kvs.len(),
            live_keys: loaded,
            seconds,
            disk_bytes: engines.iter().map(|e| e.disk_bytes()).collect(),
            vilmo_index_bytes: engines.iter().find_map(|e| e.memory_bytes()),
            process_rss_bytes: resident_bytes(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();

    // Spot-check that every engine holds the last batch's values.
    for (k, v) in kvs.iter().step_by((kvs.len() / 50).max(1)) {
        for engine in &engines {
            let got = engine.get(k)?;
            if got.as_deref() != Some(&v[..]) {
                return Err(eyre!("{:?} lost a key of the last batch", engine.kind()));
            }
        }
    }

    let live_data = (args.keys * (KEY_LEN + VALUE_LEN) as u64) as f64;
    let mut vilmo_reopen_seconds = None;
    let mut vilmo_index_bytes_per_key = None;
    let mut vilmo_disk_over_live = None;
    let mut mdbx_disk_over_live = None;
    for engine in &engines {
        match engine.kind() {
            EngineKind::Vilmo => {
                vilmo_disk_over_live = Some(engine.disk_bytes() as f64 / live_data);
                vilmo_index_bytes_per_key =
                    engine.memory_bytes().map(|b| b as f64 / args.keys as f64);
            }
            EngineKind::Mdbx => mdbx_disk_over_live = Some(engine.disk_bytes() as f64 / live_data),
        }
    }
    let position = engines.iter().position(|e| e.kind() == EngineKind::Vilmo);
    let kinds: Vec<EngineKind> = engines.iter().map(|e| e.kind()).collect();
    if let Some(pos) = position {
        // Close Vilmo and measure a cold reopen: replay every log, verify every checksum,
        // rebuild the index.
        engines.remove(pos);
        let started = Instant::now();
        let reopened = Vilmo::open(&vilmo_dir, Options::default())?;
        vilmo_reopen_seconds = Some(started.elapsed().as_secs_f64());
        if reopened.len() as u64 != args.keys {
            return Err(eyre!(
                "reopened Vilmo holds {} keys, expected {}",
                reopened.len(),
                args.keys
            ));
        }
    }
    drop(engines);

    let mut summary = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        for phase in ["load", "update"] {
            let pts: Vec<&BatchPoint> = points.iter().filter(|p| p.phase == phase).collect();
            if pts.is_empty() {
                continue;
            }
            let kv: usize = pts.iter().map(|p| p.kvs).sum();
            let secs: f64 = pts.iter().map(|p| p.seconds[i]).sum();
            let rates: Vec<f64> = pts.iter().map(|p| p.kvs as f64 / p.seconds[i]).collect();
            summary.push(PhaseSummary {
                engine: *kind,
                phase,
                kv_per_second: kv as f64 / secs,
                median_batch_kv_per_second: median(rates.clone()),
                min_batch_kv_per_second: rates.iter().copied().fold(f64::INFINITY, f64::min),
                max_batch_kv_per_second: rates.iter().copied().fold(0.0, f64::max),
            });
        }
    }
    let rate = |kind: EngineKind| -> Option<f64> {
        let i = kinds.iter().position(|k| *k == kind)?;
        let kv: usize = points.iter().map(|p| p.kvs).sum();
        let secs: f64 = points.iter().map(|p| p.seconds[i]).sum();
        Some(kv as f64 / secs)
    };
    let vilmo_over_mdbx = match (rate(EngineKind::Vilmo), rate(EngineKind::Mdbx)) {
        (Some(v), Some(m)) => Some(v / m),
        _ => None,
    };

    let report = StorageReport {
        machine,
        build_profile,
        keys: args.keys,
        batch: args.batch,
        update_batches: args.update_batches,
        zipf_s: DEVNET_S,
        zipf_v: DEVNET_V,
        seed: args.seed,
        engines: kinds,
        points,
        summary,
        vilmo_reopen_seconds,
        vilmo_index_bytes_per_key,
        vilmo_disk_over_live,
        mdbx_disk_over_live,
        vilmo_over_mdbx,
    };
    write_report(&report, &args.out)?;
    if args.keep {
        let kept = work.keep();
        println!("stores kept in {}", kept.display());
    }
    Ok(report)
}

fn write_report(report: &StorageReport, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).wrap_err_with(|| format!("cannot create {}", out.display()))?;
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(out.join("storage.json"), json)?;
    chart(report, &out.join("storage.svg"))?;
    let md = markdown(report);
    std::fs::write(out.join("storage.md"), &md)?;
    println!("{md}");
    println!(
        "report written to {}/ (storage.md, storage.json, storage.svg)",
        out.display()
    );
    Ok(())
}

/// The summary as Markdown.
pub fn markdown(r: &StorageReport) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(md, "# Storage: Vilmo and MDBX on the same batches\n");
    let _ = writeln!(md, "- workload: {} keys of 32 B with 72 B values loaded in batches of {}, then {} batches of {} Zipf-Mandelbrot (s = {}, v = {}) updates, de-duplicated per batch; every batch one durable commit", r.keys, r.batch, r.update_batches, r.batch, r.zipf_s, r.zipf_v);
    let _ = writeln!(
        md,
        "- machine: {}; build: {}; seed {}\n",
        r.machine.describe(),
        r.build_profile,
        r.seed
    );
    let mut t = Table::new(
        "llrrrr",
        [
            "engine",
            "phase",
            "kv/s (phase)",
            "median batch kv/s",
            "slowest batch",
            "fastest batch",
        ],
    );
    for s in &r.summary {
        t.row([
            format!("{:?}", s.engine),
            s.phase.to_string(),
            format!("{:.0}", s.kv_per_second),
            format!("{:.0}", s.median_batch_kv_per_second),
            format!("{:.0}", s.min_batch_kv_per_second),
            format!("{:.0}", s.max_batch_kv_per_second),
        ]);
    }
    let _ = write!(md, "{t}");
    let _ = writeln!(md);
    if let Some(x) = r.vilmo_over_mdbx {
        let _ = writeln!(md, "- Vilmo / MDBX, whole run: **{x:.2}x**");
    }
    if let Some(s) = r.vilmo_reopen_seconds {
        let _ = writeln!(md, "- Vilmo reopen with {} keys (replay, verify every checksum, rebuild the index): **{s:.2} s** (target < 5 s)", r.keys);
    }
    if let Some(b) = r.vilmo_index_bytes_per_key {
        let _ = writeln!(md, "- Vilmo index: **{b:.1} bytes per live key** (keys themselves are not held in memory; target < 80)");
    }
    if let Some(d) = r.vilmo_disk_over_live {
        let _ = writeln!(md, "- Vilmo disk / live data: **{d:.2}x** (target < 2x)");
    }
    if let Some(d) = r.mdbx_disk_over_live {
        let _ = writeln!(md, "- MDBX disk / live data: {d:.2}x");
    }
    if let Some(p) = r.points.last().and_then(|p| p.process_rss_bytes) {
        let _ = writeln!(md, "- process resident memory at the end (both engines, page cache of MDBX's map included): {:.0} MiB", p as f64 / (1 << 20) as f64);
    }
    let _ = writeln!(md, "\n![kv/s per batch](storage.svg)");
    md
}

fn chart(r: &StorageReport, file: &Path) -> Result<()> {
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| eyre!("cannot draw {}: {e}", file.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_rate = r
        .points
        .iter()
        .flat_map(|p| p.seconds.iter().map(move |s| p.kvs as f64 / s))
        .fold(1.0, f64::max);
    let n = r.points.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Durable key-values per second, per batch",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(1..n + 1, (1000f64..max_rate * 1.5).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("batch (load, then Zipf updates)")
        .y_desc("kv/s (log)")
        .draw()
        .map_err(|e| err(&e))?;
    let colors = [BLUE, RED, GREEN];
    for (i, kind) in r.engines.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                r.points
                    .iter()
                    .map(|p| (p.batch, p.kvs as f64 / p.seconds[i])),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(format!("{kind:?}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
