//! The disk's sync latency where the node keeps its data, printed with every run: the figure
//! a durable commit stands on, and what differs most between VMs of the same size.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

/// What one measurement found.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DiskSync {
    /// Median milliseconds to append 4 KiB and `fdatasync` (of 50).
    pub small_ms_p50: f64,
    /// The slowest of those 50.
    pub small_ms_max: f64,
    /// Median milliseconds to write 8 MiB and `fdatasync` (of 3).
    pub large_ms_p50: f64,
}

impl DiskSync {
    /// One line for a report's configuration.
    pub fn describe(&self) -> String {
        format!(
            "4 KiB append + fdatasync {:.2} ms (max of 50: {:.2} ms); 8 MiB write + fdatasync {:.1} ms",
            self.small_ms_p50, self.small_ms_max, self.large_ms_p50
        )
    }
}

/// Measures in a temporary file under `dir` (removed afterwards). About a second on a disk
/// of this kind; `None` (with the reason printed) where the directory is not writable.
pub fn measure(dir: &Path) -> Option<DiskSync> {
    let run = || -> std::io::Result<DiskSync> {
        // The node's data directory root may not exist yet: the node would make it anyway.
        std::fs::create_dir_all(dir)?;
        let file = tempfile::NamedTempFile::new_in(dir)?;
        let mut f = file.as_file();
        // Milliseconds of each of `times` writes of `data`, each followed by an fdatasync.
        let mut timed = |data: &[u8], times: usize| -> std::io::Result<Vec<f64>> {
            (0..times)
                .map(|_| {
                    let t = Instant::now();
                    f.write_all(data)?;
                    f.sync_data()?;
                    Ok(t.elapsed().as_secs_f64() * 1e3)
                })
                .collect()
        };
        let small = timed(&[0x5Au8; 4096], 50)?;
        let large = timed(&vec![0xA5u8; 8 << 20], 3)?;
        let small_ms_max = small.iter().copied().fold(0.0, f64::max);
        Ok(DiskSync {
            small_ms_p50: gigas_report::median(small),
            small_ms_max,
            large_ms_p50: gigas_report::median(large),
        })
    };
    match run() {
        Ok(sync) => Some(sync),
        Err(e) => {
            eprintln!(
                "cannot measure the disk's sync latency in {}: {e}",
                dir.display()
            );
            None
        }
    }
}
