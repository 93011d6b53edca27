//! Finding the memory hierarchy and this process's place in it.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::CgroupError;

/// The environment variable that points every lookup at a fake cgroup root (tests, and the
/// same variable `scripts/with-memory-limit.sh` honours). Unset or empty: the real hierarchy
/// found through `/proc/self/mountinfo`.
pub const ROOT_ENV: &str = "GIGAS_CGROUP_ROOT";

/// Which cgroup interface holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// The legacy per-controller hierarchy (`memory.limit_in_bytes`).
    V1,
    /// The unified hierarchy (`memory.max`).
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// Where to look for cgroup hierarchies: the real ones (through `/proc/self/mountinfo` and
/// `/proc/self/cgroup`), other copies of those two files, or one fixed directory.
#[derive(Debug, Clone)]
pub struct CgroupRoots {
    kind: RootsKind,
}

#[derive(Debug, Clone)]
enum RootsKind {
    Proc { mountinfo: PathBuf, cgroup: PathBuf },
    Fixed(PathBuf),
}

impl Default for CgroupRoots {
    fn default() -> Self {
        Self::from_env()
    }
}

impl CgroupRoots {
    /// The machine's hierarchies, found through `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn system() -> Self {
        Self::from_proc_files("/proc/self/mountinfo", "/proc/self/cgroup")
    }

    /// [`CgroupRoots::fixed`] at `$GIGAS_CGROUP_ROOT` when that is set and not empty, else
    /// [`CgroupRoots::system`].
    pub fn from_env() -> Self {
        match std::env::var_os(ROOT_ENV) {
            Some(root) if !root.is_empty() => Self::fixed(root),
            _ => Self::system(),
        }
    }

    /// Mount table and membership read from these files instead of `/proc/self`'s (tests).
    pub fn from_proc_files(mountinfo: impl Into<PathBuf>, cgroup: impl Into<PathBuf>) -> Self {
        Self {
            kind: RootsKind::Proc {
                mountinfo: mountinfo.into(),
                cgroup: cgroup.into(),
            },
        }
    }

    /// One directory standing for `/sys/fs/cgroup`: cgroup v2 when it has `cgroup.controllers`,
    /// else cgroup v1 with the memory hierarchy at `root/memory`. The process's own cgroup is
    /// taken to be the hierarchy's root.
    pub fn fixed(root: impl Into<PathBuf>) -> Self {
        Self {
            kind: RootsKind::Fixed(root.into()),
        }
    }

    /// Finds the memory hierarchy and this process's cgroup in it.
    pub(crate) fn locate(&self) -> Result<Located, CgroupError> {
        match &self.kind {
            RootsKind::Fixed(root) => locate_fixed(root),
            RootsKind::Proc { mountinfo, cgroup } => {
                let mounts = read_to_string(mountinfo, "read the mount table")?;
                let membership = read_to_string(cgroup, "read the cgroup membership")?;
                locate_from(&parse_mountinfo(&mounts), &parse_proc_cgroup(&membership))
            }
        }
    }
}

/// The memory hierarchy and where this process sits in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) version: CgroupVersion,
    /// The hierarchy's mount point (its root cgroup as this process sees it).
    pub(crate) mount: PathBuf,
    /// This process's own cgroup directory.
    pub(crate) own: PathBuf,
}

fn read_to_string(path: &Path, op: &'static str) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|e| CgroupError::fs(op, path, e))
}

fn locate_fixed(root: &Path) -> Result<Located, CgroupError> {
    let controllers = root.join("cgroup.controllers");
    if controllers.is_file() {
        let list = read_to_string(&controllers, "read")?;
        if !has_word(&list, "memory") {
            return Err(CgroupError::NotMounted {
                detail: format!(
                    "the cgroup v2 hierarchy at {} lacks the memory controller \
                     (cgroup.controllers: {:?})",
                    root.display(),
                    list.trim()
                ),
            });
        }
        return Ok(Located {
            version: CgroupVersion::V2,
            mount: root.to_path_buf(),
            own: root.to_path_buf(),
        });
    }
    let memory = root.join("memory");
    if memory.is_dir() {
        return Ok(Located {
            version: CgroupVersion::V1,
            mount: memory.clone(),
            own: memory,
        });
    }
    Err(CgroupError::NotMounted {
        detail: format!(
            "{} has neither cgroup.controllers (cgroup v2) nor a memory directory (cgroup v1)",
            root.display()
        ),
    })
}

/// One line of `/proc/self/mountinfo`, the fields this crate needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The path inside the file system that is mounted (for cgroups: the cgroup shown at the
    /// mount point).
    pub(crate) root: String,
    pub(crate) point: PathBuf,
    pub(crate) fstype: String,
    pub(crate) super_options: Vec<String>,
}

/// Undoes the octal escapes (`\040` for a space) the kernel writes in mountinfo paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the cgroup mounts out of a mountinfo text; lines it cannot read are skipped.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            // id parent major:minor root point options [optional...] - fstype source super
            let (before, after) = line.split_once(" - ")?;
            let before: Vec<&str> = before.split(' ').collect();
            let after: Vec<&str> = after.split(' ').collect();
            if before.len() < 6 || after.len() < 3 {
                return None;
            }
            let fstype = after[0];
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape(before[3]),
                point: PathBuf::from(unescape(before[4])),
                fstype: fstype.to_string(),
                super_options: after[2].split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// This process's cgroup paths from `/proc/self/cgroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Membership {
    /// The `0::/path` line (cgroup v2).
    pub(crate) unified: Option<String>,
    /// The line whose controllers include `memory` (cgroup v1).
    pub(crate) memory_v1: Option<String>,
}

pub(crate) fn parse_proc_cgroup(text: &str) -> Membership {
    let mut m = Membership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            m.unified = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            m.memory_v1 = Some(path.to_string());
        }
    }
    m
}

/// `path` (a cgroup path as /proc/self/cgroup shows it) as a directory under `mount`.
fn own_dir(mount: &Mount, path: &str) -> PathBuf {
    let root = mount.root.trim_end_matches('/');
    let rel = if root.is_empty() {
        Some(path)
    } else if path == root {
        Some("")
    } else {
        path.strip_prefix(root).filter(|r| r.starts_with('/'))
    };
    match rel {
        Some(rel) => {
            let dir = mount.point.join(rel.trim_start_matches('/'));
            if dir.is_dir() {
                dir
            } else {
                // A cgroup namespace or a bind mount can show a path that is not under this
                // mount; the hierarchy's root is then the closest place we can see.
                tracing::debug!(
                    "cgroup path {path} is not a directory under {}; using the mount's root",
                    mount.point.display()
                );
                mount.point.clone()
            }
        }
        None => mount.point.clone(),
    }
}

fn has_word(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

pub(crate) fn locate_from(
    mounts: &[Mount],
    membership: &Membership,
) -> Result<Located, CgroupError> {
    let mut looked = Vec::new();
    for m in mounts.iter().filter(|m| m.fstype == "cgroup2") {
        let controllers =
            fs::read_to_string(m.point.join("cgroup.controllers")).unwrap_or_default();
        if !has_word(&controllers, "memory") {
            looked.push(format!(
                "the cgroup v2 hierarchy at {} lacks the memory controller",
                m.point.display()
            ));
            continue;
        }
        let path = membership.unified.as_deref().unwrap_or("/");
        return Ok(Located {
            version: CgroupVersion::V2,
            mount: m.point.clone(),
            own: own_dir(m, path),
        });
    }
    if let Some(m) = mounts
        .iter()
        .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == "memory"))
    {
        let path = membership.memory_v1.as_deref().unwrap_or("/");
        return Ok(Located {
            version: CgroupVersion::V1,
            mount: m.point.clone(),
            own: own_dir(m, path),
        });
    }
    looked.push("no cgroup v1 hierarchy with the memory controller is mounted".to_string());
    Err(CgroupError::NotMounted {
        detail: looked.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /mnt/with\\040space rw shared:5 - ext4 /dev/vdb rw
";

    #[test]
    fn reads_cgroup_mounts() {
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(mounts[1].fstype, "cgroup");
        assert!(mounts[1].super_options.contains(&"memory".to_string()));
        assert_eq!(mounts[2].fstype, "cgroup2");
        assert_eq!(unescape("/mnt/with\\040space"), "/mnt/with space");
        assert_eq!(unescape("/plain\\"), "/plain\\");
    }

    #[test]
    fn reads_membership() {
        let m = parse_proc_cgroup(
            "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/x\n0::/user.slice\n",
        );
        assert_eq!(m.memory_v1.as_deref(), Some("/process_api/abc"));
        assert_eq!(m.unified.as_deref(), Some("/user.slice"));
    }

    #[test]
    fn v1_own_dir_under_the_mount() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join("memory");
        fs::create_dir_all(memory.join("a/b")).unwrap();
        fs::create_dir_all(memory.join("b")).unwrap();
        fs::create_dir_all(dir.path().join("unified")).unwrap();
        let mounts = vec![
            Mount {
                root: "/".into(),
                point: memory.clone(),
                fstype: "cgroup".into(),
                super_options: vec!["rw".into(), "memory".into()],
            },
            Mount {
                root: "/".into(),
                point: dir.path().join("unified"),
                fstype: "cgroup2".into(),
                super_options: vec!["rw".into()],
            },
        ];
        let membership = Membership {
            unified: Some("/".into()),
            memory_v1: Some("/a/b".into()),
        };
        let found = locate_from(&mounts, &membership).unwrap();
        assert_eq!(found.version, CgroupVersion::V1);
        assert_eq!(found.own, memory.join("a/b"));

        // A mount of a sub-tree (cgroup namespace) strips its root from the path.
        let mut sub = mounts.clone();
        sub[0].root = "/a".into();
        let found = locate_from(&sub, &membership).unwrap();
        assert_eq!(found.own, memory.join("b"));
        // Outside the mounted sub-tree: the mount's root.
        sub[0].root = "/zzz".into();
        assert_eq!(locate_from(&sub, &membership).unwrap().own, memory);
    }

    #[test]
    fn v2_needs_the_memory_controller() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("user.slice")).unwrap();
        fs::write(dir.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        let mounts = vec![Mount {
            root: "/".into(),
            point: dir.path().to_path_buf(),
            fstype: "cgroup2".into(),
            super_options: vec!["rw".into()],
        }];
        let membership = Membership {
            unified: Some("/user.slice".into()),
            memory_v1: None,
        };
        let e = locate_from(&mounts, &membership).unwrap_err();
        assert!(matches!(e, CgroupError::NotMounted { .. }), "{e}");
        assert!(e.to_string().contains("lacks the memory controller"), "{e}");
        assert!(e.to_string().contains("--memory-limit-optional"), "{e}");

        fs::write(
            dir.path().join("cgroup.controllers"),
            "cpu io memory pids\n",
        )
        .unwrap();
        let found = locate_from(&mounts, &membership).unwrap();
        assert_eq!(found.version, CgroupVersion::V2);
        assert_eq!(found.own, dir.path().join("user.slice"));
    }

    #[test]
    fn fixed_roots() {
        let dir = tempfile::tempdir().unwrap();
        let e = CgroupRoots::fixed(dir.path()).locate().unwrap_err();
        assert!(matches!(e, CgroupError::NotMounted { .. }), "{e}");
        fs::create_dir(dir.path().join("memory")).unwrap();
        let found = CgroupRoots::fixed(dir.path()).locate().unwrap();
        assert_eq!(found.version, CgroupVersion::V1);
        assert_eq!(found.own, dir.path().join("memory"));
        fs::write(dir.path().join("cgroup.controllers"), "memory\n").unwrap();
        let found = CgroupRoots::fixed(dir.path()).locate().unwrap();
        assert_eq!(found.version, CgroupVersion::V2);
    }
}
