//! gigas-mdbx: what every Gigas store on MDBX shares (the sequencer's chain history, the full
//! node's state).
//!
//! Owns: the declaration of a store's tables ([`tables!`]: name, key and value layout,
//! duplicate flags, each declared once), opening an environment with the settings reth uses
//! ([`open_env`]), creating a store's tables and checking their flags and the store's layout
//! version ([`open_tables`]), and table statistics ([`table_stats`], [`used_bytes`]).
//!
//! Must not: know any store's tables or rows. A store declares its own tables, encodes its
//! own rows and keeps its own typed error (into which [`OpenError`] converts).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

pub use signet_libmdbx;
use signet_libmdbx::sys::PageSize;
use signet_libmdbx::{
    Database, DatabaseFlags, Environment, EnvironmentFlags, Geometry, MdbxError, Mode, SyncMode,
    WriteFlags,
};

/// Most named tables an environment may hold (each store declares fewer).
const MAX_DBS: usize = 32;
/// reth's value: how far MDBX's page reclaiming may grow the list of pages it scans for reuse
/// before it takes new pages from the end of the file instead.
const RP_AUGMENT_LIMIT: u64 = 256 * 1024;

/// How a table stores several values under one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dup {
    /// One value per key.
    No,
    /// `DUPSORT`: sorted values under a key, each at most MDBX's maximum key size.
    Sorted,
    /// `DUPSORT | DUPFIXED`: sorted values of one fixed length, packed in pages.
    Fixed,
}

impl Dup {
    /// The MDBX flags a table of this kind is created with.
    pub fn flags(self) -> DatabaseFlags {
        match self {
            Dup::No => DatabaseFlags::empty(),
            Dup::Sorted => DatabaseFlags::DUP_SORT,
            Dup::Fixed => DatabaseFlags::DUP_SORT | DatabaseFlags::DUP_FIXED,
        }
    }
}

/// A store's set of tables, as [`tables!`] declares it.
pub trait TableSet: Copy + std::fmt::Debug + 'static {
    /// Every table, in declaration order (also each table's slot in the handle array).
    const ALL: &'static [Self];
    /// The table's name in the environment.
    fn name(self) -> &'static str;
    /// How the table stores several values under one key.
    fn dup(self) -> Dup;
    /// The table's position in [`TableSet::ALL`].
    fn slot(self) -> usize;
}

/// Declares a store's tables once: an enum `$name` with one variant per table, its name,
/// key and value layouts (documentation that is also queryable) and duplicate flags, and the
/// [`TableSet`] impl that [`open_tables`] needs.
///
/// ```ignore
/// gigas_mdbx::tables! {
///     /// A table of the history.
///     Table {
///         /// Sealed headers by number.
///         Headers { key: "block: u64", value: "header (RLP)", dup: No },
///     }
/// }
/// ```
#[macro_export]
macro_rules! tables {
    (
        $(#[doc = $enum_doc:literal])*
        $enum:ident {
            $(
                $(#[doc = $doc:literal])*
                $name:ident { key: $key:literal, value: $value:literal, dup: $dup:ident }
            ),* $(,)?
        }
    ) => {
        $(#[doc = $enum_doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $enum {
            $( $(#[doc = $doc])* $name, )*
        }

        impl $enum {
            /// Every table, in declaration order (also each table's slot in the handle array).
            pub const ALL: &'static [$enum] = &[$($enum::$name),*];

            /// How many tables there are.
            pub const COUNT: usize = Self::ALL.len();

            /// The table's name in the MDBX environment.
            pub const fn name(self) -> &'static str {
                match self { $($enum::$name => stringify!($name),)* }
            }

            /// The key's byte layout.
            pub const fn key_layout(self) -> &'static str {
                match self { $($enum::$name => $key,)* }
            }

            /// The value's byte layout.
            pub const fn value_layout(self) -> &'static str {
                match self { $($enum::$name => $value,)* }
            }

            /// How the table stores several values under one key.
            pub const fn dup(self) -> $crate::Dup {
                match self { $($enum::$name => $crate::Dup::$dup,)* }
            }

            /// The table's slot in `ALL` (and in the store's handle array).
            pub const fn slot(self) -> usize {
                self as usize
            }
        }

        impl $crate::TableSet for $enum {
            const ALL: &'static [Self] = $enum::ALL;

            fn name(self) -> &'static str {
                $enum::name(self)
            }

            fn dup(self) -> $crate::Dup {
                $enum::dup(self)
            }

            fn slot(self) -> usize {
                $enum::slot(self)
            }
        }
    };
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory could not be created.
    #[error("cannot create the directory {dir}: {source}")]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// MDBX refused an operation.
    #[error("MDBX failed to {op}: {source}")]
    Mdbx {
        /// What was being done ("open the environment", "create a table", ...).
        op: &'static str,
        /// MDBX's error.
        source: MdbxError,
    },
    /// The directory holds a store of another layout version.
    #[error("the store in {dir} has layout version {found}; this build reads version {expected}")]
    SchemaVersion {
        /// The directory.
        dir: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The stored layout version is not a version.
    #[error("the layout version in {dir} is {len} bytes, not a u32")]
    BadSchemaVersion {
        /// The directory.
        dir: PathBuf,
        /// Its length.
        len: usize,
    },
    /// A table exists with other flags than the declared ones.
    #[error("table {table} exists with flags {found:#x}, expected {expected:#x}")]
    TableFlags {
        /// The table.
        table: &'static str,
        /// Its flags on disk.
        found: u32,
        /// The declared flags.
        expected: u32,
    },
}

fn mdbx(op: &'static str) -> impl FnOnce(MdbxError) -> OpenError {
    move |source| OpenError::Mdbx { op, source }
}

/// How an environment is opened. Every store sets all of it; the defaults are the stores'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvOptions {
    /// Largest size the data file may grow to.
    pub max_size_bytes: usize,
    /// How much the file grows at a time.
    pub growth_step_bytes: usize,
    /// Page size (`None`: the OS page size, MDBX's default).
    pub page_size: Option<usize>,
    /// Most simultaneous read transactions.
    pub max_readers: u64,
    /// When a commit is synced.
    pub sync_mode: SyncMode,
    /// OS readahead on the data file (reth turns it off: a state larger than memory read at
    /// random pays for every readahead page it does not use).
    pub readahead: bool,
    /// Map the file writable and write pages in place.
    pub write_map: bool,
    /// With a `SafeNoSync` mode: MDBX makes a durable ("steady") point on its own at a
    /// commit this long after the first unsynced one. Setting it also stops MDBX from making
    /// one whenever the file must grow (what it does without a period or byte threshold), so
    /// that durable points come from the store's own schedule, with this as a backstop.
    pub autosync_period: Option<std::time::Duration>,
    /// Most dirty pages a write transaction keeps in memory before MDBX spills some to the
    /// file (`MDBX_opt_txn_dp_limit`; `None`: MDBX's default, a share of the machine's RAM,
    /// which knows nothing of a cgroup's limit). Without the write map dirty pages are heap.
    pub max_dirty_pages: Option<u64>,
}

/// The data file MDBX keeps in an environment's directory (beside `mdbx.lck`).
pub fn data_file(dir: &Path) -> std::path::PathBuf {
    dir.join("mdbx.dat")
}

/// Opens (creating the directory if needed) an environment: the given options, plus what every
/// Gigas store wants: the file never shrinks (a shrink remaps it, and stores only grow),
/// `coalesce` of freed pages and reth's page-reclaim limit.
pub fn open_env(dir: &Path, options: &EnvOptions) -> Result<Environment, OpenError> {
    std::fs::create_dir_all(dir).map_err(|source| OpenError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut builder = Environment::builder();
    builder
        .set_max_dbs(MAX_DBS)
        .set_max_readers(options.max_readers)
        .set_rp_augment_limit(RP_AUGMENT_LIMIT)
        .set_geometry(Geometry {
            size: Some(0..options.max_size_bytes),
            growth_step: Some(isize::try_from(options.growth_step_bytes).unwrap_or(isize::MAX)),
            shrink_threshold: Some(0),
            page_size: options.page_size.map(PageSize::Set),
        })
        .set_flags(EnvironmentFlags {
            mode: Mode::ReadWrite {
                sync_mode: options.sync_mode,
            },
            no_rdahead: !options.readahead,
            coalesce: true,
            ..Default::default()
        });
    if options.write_map {
        builder.write_map();
    }
    if let Some(period) = options.autosync_period {
        builder.set_sync_period(period);
    }
    if let Some(pages) = options.max_dirty_pages {
        builder.set_txn_dp_limit(pages);
    }
    builder.open(dir).map_err(mdbx("open the environment"))
}

/// Creates the tables of `T` that are missing, checks the flags of those that exist, and
/// writes (new store) or checks (existing store) the layout version `version` under `key` in
/// table `meta`; all in one committed transaction. Returns the handles in `T::ALL` order.
pub fn open_tables<T: TableSet>(
    env: &Environment,
    dir: &Path,
    meta: T,
    key: &[u8],
    version: u32,
) -> Result<Vec<Database>, OpenError> {
    let txn = env
        .begin_rw_unsync()
        .map_err(mdbx("begin the table-creating transaction"))?;
    let relevant = DatabaseFlags::DUP_SORT | DatabaseFlags::DUP_FIXED | DatabaseFlags::INTEGER_KEY;
    let mut dbs = Vec::with_capacity(T::ALL.len());
    for &table in T::ALL {
        let expected = table.dup().flags();
        let db = txn
            .create_db(Some(table.name()), expected)
            .map_err(mdbx("create a table"))?;
        if db.flags() & relevant != expected {
            return Err(OpenError::TableFlags {
                table: table.name(),
                found: db.flags().bits(),
                expected: expected.bits(),
            });
        }
        dbs.push(db);
    }
    let meta_db = dbs[meta.slot()];
    let stored: Option<Cow<'_, [u8]>> = txn.get(meta_db.dbi(), key).map_err(|e| match e {
        signet_libmdbx::ReadError::Mdbx(source) => OpenError::Mdbx {
            op: "read the layout version",
            source,
        },
        signet_libmdbx::ReadError::Decoding(_) => OpenError::BadSchemaVersion {
            dir: dir.to_path_buf(),
            len: 0,
        },
    })?;
    match stored {
        None => txn
            .put(meta_db, key, version.to_be_bytes(), WriteFlags::empty())
            .map_err(mdbx("write the layout version"))?,
        Some(bytes) => {
            let found = <[u8; 4]>::try_from(bytes.as_ref())
                .map(u32::from_be_bytes)
                .map_err(|_| OpenError::BadSchemaVersion {
                    dir: dir.to_path_buf(),
                    len: bytes.len(),
                })?;
            if found != version {
                return Err(OpenError::SchemaVersion {
                    dir: dir.to_path_buf(),
                    found,
                    expected: version,
                });
            }
        }
    }
    txn.commit()
        .map_err(mdbx("commit the table-creating transaction"))?;
    Ok(dbs)
}

/// Entries and pages of one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStats<T> {
    /// The table.
    pub table: T,
    /// Rows (for DUPSORT tables: values).
    pub entries: u64,
    /// Branch pages.
    pub branch_pages: u64,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Overflow pages.
    pub overflow_pages: u64,
    /// Bytes of all its pages.
    pub bytes: u64,
}

impl<T> TableStats<T> {
    /// The same figures under another name for the table (a store that opens several table
    /// sets in one environment lists them together).
    pub fn with_table<U>(self, table: U) -> TableStats<U> {
        TableStats {
            table,
            entries: self.entries,
            branch_pages: self.branch_pages,
            leaf_pages: self.leaf_pages,
            overflow_pages: self.overflow_pages,
            bytes: self.bytes,
        }
    }
}

/// The statistics of every table of `T`, whose handles `dbs` holds in `T::ALL` order.
pub fn table_stats<T: TableSet>(
    env: &Environment,
    dbs: &[Database],
) -> Result<Vec<TableStats<T>>, MdbxError> {
    let txn = env.begin_ro_unsync()?;
    T::ALL
        .iter()
        .zip(dbs)
        .map(|(&table, db)| {
            let stat = txn.db_stat(db)?;
            let (branch, leaf, overflow) = (
                stat.branch_pages() as u64,
                stat.leaf_pages() as u64,
                stat.overflow_pages() as u64,
            );
            Ok(TableStats {
                table,
                entries: stat.entries() as u64,
                branch_pages: branch,
                leaf_pages: leaf,
                overflow_pages: overflow,
                bytes: (branch + leaf + overflow) * u64::from(stat.page_size()),
            })
        })
        .collect()
}

/// Bytes of the data file up to its last used page (the file itself is sparse and may be
/// larger), and the size of the memory map; `None` when MDBX cannot say.
pub fn used_bytes(env: &Environment) -> Option<(u64, u64)> {
    let (info, stat) = (env.info().ok()?, env.stat().ok()?);
    let used = (info.last_pgno() as u64 + 1) * u64::from(stat.page_size());
    Some((used, info.map_size() as u64))
}

/// A key as the hex that errors print.
pub fn hex_key(key: &[u8]) -> String {
    hex::encode(key)
}

/// A store's error type, as far as the shared MDBX plumbing needs it: each store keeps its
/// own enum (its own variants and messages) and says how three facts map onto it; the
/// constructors every call site uses (`map_err(E::mdbx("..."))`, `E::read`, `E::corrupt`)
/// come from here so they read the same in every store.
pub trait StoreError: Sized {
    /// MDBX refused `op`.
    fn from_mdbx(op: &'static str, source: MdbxError) -> Self;
    /// Opening the store failed for a reason other than an MDBX refusal.
    fn from_open_failure(error: OpenError) -> Self;
    /// A row of `table` under `key` (hex) does not decode: `reason`.
    fn from_corrupt_row(table: &'static str, key: String, reason: String) -> Self;

    /// For `map_err`: MDBX refused `op`.
    fn mdbx(op: &'static str) -> impl FnOnce(MdbxError) -> Self {
        move |source| Self::from_mdbx(op, source)
    }

    /// For `map_err` on typed reads: an MDBX refusal, or a row that did not decode.
    fn read(op: &'static str) -> impl FnOnce(signet_libmdbx::ReadError) -> Self {
        move |error| match error {
            signet_libmdbx::ReadError::Mdbx(source) => Self::from_mdbx(op, source),
            // Stores decode rows into byte slices, which cannot fail; kept total anyway.
            signet_libmdbx::ReadError::Decoding(e) => {
                Self::from_corrupt_row(op, String::new(), e.to_string())
            }
        }
    }

    /// A row of `table` under `key` is corrupt.
    fn corrupt(table: &'static str, key: &[u8], reason: impl ToString) -> Self {
        Self::from_corrupt_row(table, hex_key(key), reason.to_string())
    }

    /// An [`OpenError`], with MDBX's refusals kept in the store's one MDBX variant whoever
    /// met them (for the store's `From<OpenError>`).
    fn from_open(error: OpenError) -> Self {
        match error {
            OpenError::Mdbx { op, source } => Self::from_mdbx(op, source),
            other => Self::from_open_failure(other),
        }
    }
}

/// For each store's tests: the crate documentation's table list (`//! | `Name` |` rows)
/// names every declared table, so a table added to [`tables!`] cannot go undocumented.
/// The error names the first table missing. (Distinct names and slots in declaration order
/// need no check: the enum's variants give both.)
pub fn check_table_doc<T: TableSet>(crate_doc: &str) -> Result<(), String> {
    match T::ALL
        .iter()
        .find(|t| !crate_doc.contains(&format!("//! | `{}` |", t.name())))
    {
        Some(missing) => Err(format!("the table list misses {}", missing.name())),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(dead_code, unreachable_pub)]
mod tests {
    use super::*;

    tables! {
        /// Tables of the test store.
        Test {
            /// Plain rows.
            Plain { key: "k", value: "v", dup: No },
            /// Sorted duplicates.
            Sorted { key: "k", value: "v", dup: Sorted },
            /// Small named values.
            Meta { key: "name", value: "per name", dup: No },
        }
    }

    tables! {
        /// The same names, one with other flags.
        Other {
            /// Now with duplicates.
            Plain { key: "k", value: "v", dup: Fixed },
            /// Sorted duplicates.
            Sorted { key: "k", value: "v", dup: Sorted },
            /// Small named values.
            Meta { key: "name", value: "per name", dup: No },
        }
    }

    fn options() -> EnvOptions {
        EnvOptions {
            max_size_bytes: 1 << 30,
            growth_step_bytes: 1 << 20,
            page_size: None,
            max_readers: 16,
            sync_mode: SyncMode::Durable,
            readahead: false,
            write_map: false,
            autosync_period: None,
            max_dirty_pages: None,
        }
    }

    #[test]
    fn declared_tables_know_their_slots_and_flags() {
        for (i, table) in Test::ALL.iter().enumerate() {
            assert_eq!(table.slot(), i);
        }
        let doc = "//! | `Plain` |\n//! | `Sorted` |";
        assert_eq!(
            check_table_doc::<Test>(doc),
            Err("the table list misses Meta".to_string())
        );
        assert_eq!(
            check_table_doc::<Test>(&format!("{doc}\n//! | `Meta` | name |")),
            Ok(())
        );
        assert_eq!(Test::COUNT, 3);
        assert_eq!(Test::Sorted.dup().flags(), DatabaseFlags::DUP_SORT);
        assert_eq!(Test::Plain.key_layout(), "k");
    }

    #[test]
    fn open_checks_version_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        {
            let env = open_env(dir.path(), &options()).unwrap();
            let dbs = open_tables(&env, dir.path(), Test::Meta, b"schema_version", 1).unwrap();
            assert_eq!(dbs.len(), 3);
            let stats = table_stats::<Test>(&env, &dbs).unwrap();
            assert!(stats
                .iter()
                .all(|s| s.table != Test::Meta || s.entries == 1));
            assert!(used_bytes(&env).is_some_and(|(used, _)| used > 0));
            // The same version opens again.
            open_tables(&env, dir.path(), Test::Meta, b"schema_version", 1).unwrap();
            let err = open_tables(&env, dir.path(), Test::Meta, b"schema_version", 2).unwrap_err();
            assert!(
                matches!(
                    err,
                    OpenError::SchemaVersion {
                        found: 1,
                        expected: 2,
                        ..
                    }
                ),
                "{err}"
            );
            let err = open_tables(&env, dir.path(), Other::Meta, b"schema_version", 1).unwrap_err();
            assert!(
                matches!(err, OpenError::TableFlags { table: "Plain", .. }),
                "{err}"
            );
        }
    }
}
