//! The `--memory-limit` flags every Gigas binary shares.

use crate::cgroup::MemoryCgroup;
use crate::detect::CgroupRoots;
use crate::error::CgroupError;
use crate::size::{format_size, parse_size, SizeError};

/// `--memory-limit SIZE` and `--memory-limit-optional`, for `#[command(flatten)]` into a
/// binary's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct MemoryLimitArgs {
    /// Hold this process to SIZE bytes of memory in a new cgroup (v2 `memory.max` or v1
    /// `memory.limit_in_bytes`, swap included), set up before any database is opened. The
    /// page cache the process reads counts, an MDBX map's pages included. Binary units:
    /// 512MiB, 512M, 8GiB, 8G, or a byte count. Needs a writable cgroup (root, or a delegated
    /// one); the cgroup is removed on exit.
    #[arg(long, value_name = "SIZE", value_parser = parse_limit)]
    pub memory_limit: Option<u64>,

    /// With --memory-limit: when no cgroup can be made or joined here, go on without a limit
    /// (with a warning) instead of stopping.
    #[arg(long, requires = "memory_limit")]
    pub memory_limit_optional: bool,
}

/// `parse_size`, refusing zero, for clap.
fn parse_limit(s: &str) -> Result<u64, SizeError> {
    match parse_size(s)? {
        0 => Err(SizeError {
            input: s.to_string(),
            reason: "a limit of 0 bytes cannot run anything",
        }),
        n => Ok(n),
    }
}

impl MemoryLimitArgs {
    /// Places this process in a new cgroup `gigas-NAME-PID` with the limit, when one was
    /// asked for, in the hierarchy [`CgroupRoots::from_env`] finds. Keep the returned value
    /// alive until the end of `main`: dropping it moves the process back and removes the
    /// cgroup. Logs what it did (version, path, limit). With `--memory-limit-optional`, a
    /// machine or privilege that allows no cgroup gives a warning and `Ok(None)`.
    pub fn apply(&self, name: &str) -> Result<Option<MemoryCgroup>, CgroupError> {
        self.apply_in(&CgroupRoots::from_env(), name)
    }

    /// [`MemoryLimitArgs::apply`] in the hierarchy `roots` finds.
    pub fn apply_in(
        &self,
        roots: &CgroupRoots,
        name: &str,
    ) -> Result<Option<MemoryCgroup>, CgroupError> {
        let Some(limit) = self.memory_limit else {
            return Ok(None);
        };
        let placed = MemoryCgroup::create_in(roots, name, limit).and_then(|mut cgroup| {
            cgroup.enter_self()?;
            Ok(cgroup)
        });
        match placed {
            Ok(cgroup) => {
                let me = std::process::id();
                if !cgroup.pids()?.contains(&me) {
                    tracing::warn!(
                        "process {me} moved into {} but is not listed in its cgroup.procs",
                        cgroup.path().display()
                    );
                }
                tracing::info!(
                    "memory limit {} ({} bytes) in cgroup {} {}{}; process {} entered it",
                    format_size(cgroup.limit()),
                    cgroup.limit(),
                    cgroup.version(),
                    cgroup.path().display(),
                    if cgroup.swap_held() {
                        ", swap held to the same limit"
                    } else {
                        ", swap not accounted"
                    },
                    me,
                );
                Ok(Some(cgroup))
            }
            Err(e) if self.memory_limit_optional && e.is_environment() => {
                tracing::warn!(
                    "NO MEMORY LIMIT: --memory-limit {} was asked for but cannot be applied \
                     here, and --memory-limit-optional says to go on without it. Cause: {e}",
                    format_size(limit)
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        memory: MemoryLimitArgs,
    }

    #[test]
    fn flags() {
        let cli = Cli::try_parse_from(["x", "--memory-limit", "8G"]).unwrap();
        assert_eq!(cli.memory.memory_limit, Some(8 << 30));
        assert!(!cli.memory.memory_limit_optional);
        let cli = Cli::try_parse_from(["x", "--memory-limit", "512MiB", "--memory-limit-optional"])
            .unwrap();
        assert_eq!(cli.memory.memory_limit, Some(512 << 20));
        assert!(cli.memory.memory_limit_optional);
        assert_eq!(
            Cli::try_parse_from(["x"]).unwrap().memory,
            MemoryLimitArgs::default()
        );
        let e = Cli::try_parse_from(["x", "--memory-limit", "1.5G"]).unwrap_err();
        assert!(e.to_string().contains("fractions"), "{e}");
        let e = Cli::try_parse_from(["x", "--memory-limit", "0"]).unwrap_err();
        assert!(e.to_string().contains("0 bytes"), "{e}");
        assert!(Cli::try_parse_from(["x", "--memory-limit-optional"]).is_err());
    }

    #[test]
    fn no_limit_does_nothing_and_optional_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let roots = CgroupRoots::fixed(dir.path().join("missing"));
        assert!(MemoryLimitArgs::default()
            .apply_in(&roots, "t")
            .unwrap()
            .is_none());
        let strict = MemoryLimitArgs {
            memory_limit: Some(64 << 20),
            memory_limit_optional: false,
        };
        let e = strict.apply_in(&roots, "t").unwrap_err();
        assert!(matches!(e, CgroupError::NotMounted { .. }), "{e}");
        let optional = MemoryLimitArgs {
            memory_limit_optional: true,
            ..strict.clone()
        };
        assert!(optional.apply_in(&roots, "t").unwrap().is_none());
        // A bad name is a mistake, not the machine: optional does not hide it.
        assert!(matches!(
            optional.apply_in(&roots, "a/b"),
            Err(CgroupError::InvalidName { .. })
        ));
    }
}
