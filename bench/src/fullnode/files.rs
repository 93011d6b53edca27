//! The genesis database (written once, cached) and each run's copy of it, with the page
//! cache warm or cold.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use eyre::{eyre, Result, WrapErr};
use gigas_fullnode::metrics::ProcessMemory;
use gigas_statedb::{StateDb, StateDbOptions};
use indicatif::{ProgressBar, ProgressStyle};

use super::figures::GenesisInfo;
use super::replay::reset_peak_rss;
use super::Manifest;
pub(super) fn spinner(quiet: bool, message: String) -> ProgressBar {
    if quiet {
        println!("{message}");
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Bytes the files directly in `dir` occupy on disk (blocks allocated).
pub(super) fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.blocks() * 512)
            .sum()
    })
}

pub(super) fn used_bytes(db: &StateDb) -> u64 {
    db.refresh_size_metrics();
    u64::try_from(db.metrics().used_bytes.get()).unwrap_or(0)
}

pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The genesis database of the recording's chain: cached under `cache`, written with
/// `gigas_fullnode::genesis::initialize` when missing (or with `fresh`).
pub(super) fn ensure_genesis_db(
    recording: &Manifest,
    cache: &Path,
    page_size: Option<usize>,
    fresh: bool,
    quiet: bool,
) -> Result<GenesisInfo> {
    let chain = recording.load_chain()?;
    // Suffixes only off the defaults, so that older caches keep their names.
    let root = cache.join(format!(
        "genesis-db-{}-{}-gas{}{}{}",
        recording.accounts,
        recording.seed,
        recording.gas_limit,
        if recording.workload == crate::load::Workload::Transfers {
            ""
        } else {
            "-erc20"
        },
        page_size.map_or_else(String::new, |p| format!("-page{p}"))
    ));
    let info_path = root.join("genesis.json");
    let diff0 = std::fs::read(recording.diff_path(0)).wrap_err("reading the recording's diff 0")?;
    // A recording made with the state commitment is replayed with it, as a node follows.
    let commitment = gigas_statediff::DiffFile::decode(&diff0)
        .map_err(|e| eyre!("the recording's diff 0: {e}"))?
        .commitment
        .is_some();
    if !fresh && info_path.is_file() {
        let cached = std::fs::read_to_string(&info_path)
            .ok()
            .and_then(|t| serde_json::from_str::<GenesisInfo>(&t).ok());
        match cached {
            Some(mut info)
                if info.chain_fingerprint == recording.chain_fingerprint
                    && info.layout_version == gigas_statedb::SCHEMA_VERSION
                    && info.state_commitment == commitment
                    && (!commitment
                        || info.commitment_version
                            == gigas_statediff::commitment::COMMITMENT_VERSION) =>
            {
                info.dir = root.join("db");
                println!(
                    "genesis database {} ({} accounts, {:.2} GB on disk; written in {:.1} s)",
                    info.dir.display(),
                    info.accounts,
                    info.disk_bytes as f64 / 1e9,
                    info.seconds
                );
                return Ok(info);
            }
            _ => eprintln!(
                "{}: not this chain's genesis or not this build's layout; writing it again",
                root.display()
            ),
        }
    }
    if root.exists() {
        std::fs::remove_dir_all(&root).wrap_err_with(|| format!("clearing {}", root.display()))?;
    }
    let db_dir = root.join("db");
    std::fs::create_dir_all(&db_dir).wrap_err_with(|| format!("creating {}", db_dir.display()))?;
    let bar = spinner(
        quiet,
        format!(
            "writing the genesis of {} accounts into {} (gigas_fullnode::genesis::initialize)",
            recording.accounts,
            db_dir.display()
        ),
    );
    reset_peak_rss();
    let started = Instant::now();
    let db = StateDb::open(
        &db_dir,
        StateDbOptions {
            page_size,
            ..StateDbOptions::default()
        },
    )?;
    let (_, outcome) = gigas_fullnode::genesis::initialize(&db, &chain, &diff0, commitment)
        .map_err(|e| eyre!("writing the genesis: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let used = used_bytes(&db);
    drop(db);
    let info = GenesisInfo {
        chain_fingerprint: recording.chain_fingerprint.clone(),
        layout_version: gigas_statedb::SCHEMA_VERSION,
        state_commitment: commitment,
        commitment_version: gigas_statediff::commitment::COMMITMENT_VERSION,
        seconds,
        accounts: outcome.accounts,
        slots: outcome.slots,
        state_root: outcome.state_root.to_string(),
        disk_bytes: disk_bytes(&db_dir),
        used_bytes: used,
        peak_rss_bytes: ProcessMemory::read().map(|m| m.peak),
        built_at: unix_now(),
        built_now: true,
        copy_seconds: 0.0,
        dir: db_dir,
    };
    println!(
        "genesis written in {seconds:.1} s: {} accounts, root {}, {:.2} GB on disk",
        info.accounts,
        info.state_root,
        info.disk_bytes as f64 / 1e9
    );
    std::fs::write(&info_path, serde_json::to_string_pretty(&info)?)
        .wrap_err_with(|| format!("writing {}", info_path.display()))?;
    Ok(info)
}

/// The database files of `dir`: every regular file but MDBX's lock file.
fn db_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).wrap_err_with(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().ends_with(".lck") && entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    Ok(files)
}

/// Copies the database files of `from` into a new `to` and syncs them, so that no write-back
/// of the copy lands in the measured run, then with `evict` drops the copy from the page
/// cache. The lock file is left for MDBX to create.
pub(super) fn copy_db(from: &Path, to: &Path, evict: bool) -> Result<f64> {
    let started = Instant::now();
    std::fs::create_dir_all(to).wrap_err_with(|| format!("creating {}", to.display()))?;
    for source in db_files(from)? {
        let target = to.join(source.file_name().unwrap_or_default());
        copy_sparse(&source, &target)
            .wrap_err_with(|| format!("copying {} to {}", source.display(), target.display()))?;
        std::fs::File::open(&target)
            .and_then(|f| f.sync_all())
            .wrap_err_with(|| format!("syncing {}", target.display()))?;
        if evict {
            recache(&target, false)
                .wrap_err_with(|| format!("evicting {} from the page cache", target.display()))?;
        }
    }
    std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .wrap_err_with(|| format!("syncing {}", to.display()))?;
    Ok(started.elapsed().as_secs_f64())
}

/// [`recache`] with `warm` over every database file of `dir`: the pages are charged to the
/// memory cgroup this process is in.
pub(super) fn recache_dir(dir: &Path) -> Result<()> {
    for path in db_files(dir)? {
        recache(&path, true)
            .wrap_err_with(|| format!("reading {} into the page cache", path.display()))?;
    }
    Ok(())
}

/// Evicts the (synced, so clean) pages of `path` from the page cache, then with `warm` reads
/// them back 4 KiB at a time with readahead off, so that the cache holds the file in base
/// pages, as MDBX's own page faults (readahead off) would have left it. A copy's buffered
/// writes leave it in large folios (ext4 on Linux 6.16 and later), and a 4 KiB write through
/// MDBX's map then dirties, and the commit's sync writes back, a whole folio.
pub(super) fn recache(path: &Path, warm: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: fadvise on a descriptor this function owns.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    if !warm {
        return Ok(());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    let len = i64::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
    let mut page = vec![0u8; 4096];
    let mut pos = 0i64;
    while pos < len {
        // SAFETY: lseek on a descriptor this function owns.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = data as u64;
        while at < hole as u64 {
            if file.read_at(&mut page, at)? == 0 {
                break;
            }
            at += page.len() as u64;
        }
        pos = hole;
    }
    Ok(())
}

/// Copies `from` to `to` keeping its holes: MDBX grows its file in large sparse steps, and a
/// plain copy would write the unused tail as zeros (up to a growth step, 1 GiB, per run).
pub(super) fn copy_sparse(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let src = std::fs::File::open(from)?;
    let len = i64::try_from(src.metadata()?.len()).map_err(std::io::Error::other)?;
    let dst = std::fs::File::create(to)?;
    dst.set_len(len as u64)?;
    let (s, d) = (src.as_raw_fd(), dst.as_raw_fd());
    let mut pos = 0i64;
    while pos < len {
        // SAFETY: lseek on a file descriptor this function owns.
        let data = unsafe { libc::lseek(s, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole is left
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(s, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut off_in, mut off_out) = (data, data);
        while off_in < hole {
            let want = usize::try_from(hole - off_in).unwrap_or(usize::MAX);
            // SAFETY: both descriptors are open; the offsets are ours.
            let n = unsafe { libc::copy_file_range(s, &mut off_in, d, &mut off_out, want, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
        }
        pos = hole;
    }
    Ok(())
}

/// The filesystem `path` is on, from /proc/mounts: "ext4 on /dev/vda (mounted at /)".
pub(super) fn filesystem_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (device, point, kind) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(point)
                .then_some((point.len(), device, point, kind))
        })
        .max_by_key(|m| m.0)
        .map_or("unknown filesystem".into(), |(_, device, point, kind)| {
            format!("{kind} on {device} (mounted at {point})")
        })
}
