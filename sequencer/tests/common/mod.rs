//! Starting and killing a real `gigas-sequencer` process for integration tests.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use gigas_chain::ChainConfig;
use gigas_primitives::{AccountState, LatticeHash};
use gigas_statediff::{
    index_lattice, verify_and_decode_timed, ChainTip, DiffFile, KeyIndex as _, MemoryKeyIndex,
    MemoryState, VerifyTimings,
};

/// A running node process; killed when dropped.
pub struct NodeProcess {
    child: Child,
    /// http://127.0.0.1:PORT
    pub url: String,
    /// ws://127.0.0.1:PORT
    pub ws: String,
    /// The node's data directory.
    pub datadir: PathBuf,
    /// Where its log goes.
    pub log: PathBuf,
    /// Lines it printed on stdout before the RPC line (the dev accounts).
    pub banner: Vec<String>,
}

impl NodeProcess {
    /// Starts `gigas-sequencer --dev --datadir DIR --http.port 0` plus `extra`, and waits
    /// until its JSON-RPC server listens.
    pub fn start(datadir: &Path, extra: &[&str]) -> Self {
        let log = datadir.with_extension("log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open node log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_gigas-sequencer"))
            .args(["--dev", "--http.port", "0", "--datadir"])
            .arg(datadir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn gigas-sequencer");
        let stdout = child.stdout.take().expect("stdout piped");
        let copy = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("open node log");
        // Every line goes to the log file, and to the test until it has the RPC line.
        let lines = gigas_launch::tee_lines("node", stdout, Some(copy)).expect("the log thread");
        match gigas_launch::wait_for_rpc(&lines, Duration::from_secs(120)) {
            Ok(ready) => Self {
                child,
                ws: ready.ws_url(),
                url: ready.url,
                datadir: datadir.to_path_buf(),
                log,
                banner: ready.before,
            },
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("gigas-sequencer did not start ({e}); its log:\n{text}");
            }
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The node's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A follower that knows only the chain spec and what the archive publishes.
pub struct Follower {
    pub sequencer: Address,
    pub state: MemoryState,
    pub index: MemoryKeyIndex,
    pub tip: ChainTip,
    /// The state commitment kept block by block from the signed ones.
    pub lattice: LatticeHash,
}

impl Follower {
    /// Builds the genesis state from the dev chain spec and checks diff 0 (the genesis
    /// header) against it.
    pub fn from_genesis(diff0: &[u8]) -> Self {
        let chain = ChainConfig::dev(250).unwrap();
        let sequencer = chain.signer().unwrap().address();
        let mut state = MemoryState::new();
        for (address, account) in &chain.alloc {
            state.insert_account(
                *address,
                AccountState {
                    nonce: account.nonce,
                    balance: account.balance,
                    code_hash: alloy_primitives::keccak256(&account.code),
                },
            );
        }
        let genesis = DiffFile::decode(diff0).expect("diff 0 decodes");
        assert_eq!(genesis.header.number, 0);
        assert_eq!(
            genesis.header.state_root,
            state_root(&state),
            "the genesis header's stateRoot is the chain spec's state's"
        );
        let hash = genesis.header.hash_slow();
        assert_eq!(
            alloy_consensus::crypto::secp256k1::recover_signer(&genesis.signature, hash).unwrap(),
            sequencer
        );
        // Diff 0 carries the genesis state's commitment, signed.
        let commitment = genesis
            .commitment
            .expect("diff 0 carries a state commitment");
        let lattice = state.lattice();
        assert_eq!(commitment.lattice, lattice.checksum());
        assert_eq!(commitment.signer(&hash), Some(sequencer));
        Self {
            sequencer,
            state,
            index: MemoryKeyIndex::new(),
            tip: ChainTip::of(&genesis.header),
            lattice,
        }
    }

    /// Verifies and applies the next diff; returns its block hash.
    pub fn apply(&mut self, bytes: &[u8]) -> B256 {
        let verified = verify_and_decode_timed(
            &self.tip,
            Some(&self.lattice),
            self.sequencer,
            bytes,
            &self.index,
            &self.state,
            &mut VerifyTimings::default(),
        )
        .unwrap_or_else(|e| panic!("diff after block {} rejected: {e}", self.tip.number));
        self.index.extend(&verified.new_keys).unwrap();
        self.state.apply(&verified.changes);
        // The signed header's stateRoot is the root of the state after the block, from
        // scratch (alloy-trie), whatever the sequencer's trie store did.
        assert_eq!(
            verified.header.state_root,
            state_root(&self.state),
            "block {}'s stateRoot",
            verified.header.number
        );
        self.tip = verified.tip();
        self.lattice = verified.lattice.expect("the kept commitment moved");
        // The kept sum is the sum from scratch of the state and the index it describes.
        let mut scratch = self.state.lattice();
        scratch.add(&index_lattice(&self.index, 0, self.index.len().unwrap()).unwrap());
        assert_eq!(self.lattice, scratch, "block {}", self.tip.number);
        verified.hash
    }
}

/// The Ethereum state root of `state`, from scratch (alloy-trie).
pub fn state_root(state: &MemoryState) -> B256 {
    let mut scratch = gigas_trie::ScratchState::new();
    for (address, account) in state.accounts() {
        scratch.account(*address, *account);
    }
    for (address, slot, value) in state.slots() {
        scratch.slot(*address, *slot, *value);
    }
    scratch.root().expect("a state makes a trie")
}

/// The text of `http://ADDR/metrics` (a plain HTTP/1.1 GET, headers included).
pub fn scrape_metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut out = String::new();
    stream.read_to_string(&mut out).expect("read the metrics");
    out
}
