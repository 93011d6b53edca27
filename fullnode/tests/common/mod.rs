//! Real processes for the full node's integration tests: a `gigas-sequencer --dev` (the
//! binary `cargo test --workspace` builds beside this test), `gigas-fullnode`, a load of
//! signed transactions that touches balances, nonces and storage, and metric scraping.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use alloy_signer_local::PrivateKeySigner;
use gigas_chain::dev_signer;

/// The `gigas-sequencer` binary the workspace build made beside this test.
pub fn sequencer_bin() -> PathBuf {
    gigas_test_support::workspace_binary("gigas-sequencer")
}

/// A node process (sequencer or full node), killed when dropped.
pub struct Process {
    child: Child,
    /// `http://127.0.0.1:PORT` of its JSON-RPC (and diff archive, for a sequencer).
    pub url: String,
    /// `http://ADDR/metrics`, when it printed one.
    pub metrics: Option<String>,
    /// Its log file.
    pub log: PathBuf,
}

impl Process {
    /// Starts `bin args`, logging to `log`, and waits for its "JSON-RPC listening on" line.
    pub fn start(bin: &Path, args: &[String], log: &Path) -> Self {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the log");
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout piped");
        let copy = std::fs::OpenOptions::new()
            .append(true)
            .open(log)
            .expect("open the log");
        let lines = gigas_launch::tee_lines("node", stdout, Some(copy)).expect("the log thread");
        match gigas_launch::wait_for_rpc(&lines, Duration::from_secs(120)) {
            Ok(ready) => Self {
                child,
                metrics: ready.banner_value("metrics on ").map(str::to_string),
                url: ready.url,
                log: log.to_path_buf(),
            },
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let text = std::fs::read_to_string(log).unwrap_or_default();
                panic!("{} did not start ({e}); its log:\n{text}", bin.display());
            }
        }
    }

    /// A dev sequencer in `dir` on a free port.
    pub fn sequencer(dir: &Path) -> Self {
        Self::sequencer_with(dir, &[])
    }

    /// A dev sequencer in `dir` on a free port, with `extra` flags.
    pub fn sequencer_with(dir: &Path, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec![
            "--dev".into(),
            "--http.port".into(),
            "0".into(),
            "--datadir".into(),
            dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start(&sequencer_bin(), &args, &dir.with_extension("log"))
    }

    /// A dev full node in `dir` following `source`, with `extra` flags.
    pub fn fullnode(dir: &Path, source: &str, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec![
            "--dev".into(),
            "--sequencer".into(),
            source.into(),
            "--http.port".into(),
            "0".into(),
            "--metrics".into(),
            "127.0.0.1:0".into(),
            "--datadir".into(),
            dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start(
            Path::new(env!("CARGO_BIN_EXE_gigas-fullnode")),
            &args,
            &dir.with_extension("log"),
        )
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM-free stop: SIGINT (Ctrl-C), and wait.
    pub fn interrupt(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One metric's value (the first sample whose name and labels start with `name`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let url = self.metrics.as_ref()?;
        let text = reqwest::blocking_get(url)?;
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Asserts that the metric `name` reached `min` (a missing one counts as 0).
    pub fn assert_metric_at_least(&self, name: &str, min: f64, what: &str) {
        let value = self.metric(name).unwrap_or(0.0);
        assert!(
            value >= min,
            "{name} is {value}, at least {min} expected: {what}"
        );
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Minimal blocking HTTP over a std socket (usable inside and outside async code).
pub mod reqwest {
    use std::io::{Read, Write};

    /// GET `url` (`http://host:port/path`): the status and the body as text; `None` on any
    /// failure.
    fn blocking(url: &str) -> Option<(u16, String)> {
        let rest = url.strip_prefix("http://")?;
        let (host, path) = rest
            .split_once('/')
            .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
        let mut stream = std::net::TcpStream::connect(host).ok()?;
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let (_, body) = text.split_once("\r\n\r\n")?;
        Some((status, body.to_string()))
    }

    /// GET `url` (`http://host:port/path`) as text; `None` on any failure.
    pub fn blocking_get(url: &str) -> Option<String> {
        blocking(url).map(|(_, body)| body)
    }

    /// The status of a GET of `url`; `None` on any failure.
    pub fn blocking_status(url: &str) -> Option<u16> {
        blocking(url).map(|(status, _)| status)
    }
}

/// One JSON-RPC call.
pub async fn rpc(url: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let client = ::reqwest::Client::new();
    let answer: serde_json::Value = client
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} to {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("{method} to {url}: not JSON: {e}"));
    answer
}

/// `result` of a JSON-RPC call, as a number from a hex quantity.
pub async fn rpc_u256(url: &str, method: &str, params: serde_json::Value) -> U256 {
    let answer = rpc(url, method, params.clone()).await;
    let hex = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{method}({params}) at {url}: {answer}"));
    hex.parse::<U256>()
        .unwrap_or_else(|e| panic!("{method}: {hex}: {e}"))
}

/// The storage contract: `calldata = slot (32) ‖ value (32)` stores value at slot.
/// Runtime `PUSH1 32 CALLDATALOAD PUSH1 0 CALLDATALOAD SSTORE STOP`.
pub const STORE_RUNTIME: [u8; 8] = [0x60, 0x20, 0x35, 0x60, 0x00, 0x35, 0x55, 0x00];

/// Init code returning [`STORE_RUNTIME`].
pub fn store_init_code() -> Bytes {
    let mut code = vec![0x67];
    code.extend_from_slice(&STORE_RUNTIME);
    // PUSH1 0 MSTORE PUSH1 8 PUSH1 24 RETURN
    code.extend_from_slice(&[0x60, 0x00, 0x52, 0x60, 0x08, 0x60, 0x18, 0xf3]);
    code.into()
}

fn eip1559(nonce: u64, to: TxKind, value: U256, gas: u64, input: Bytes) -> TxEip1559 {
    TxEip1559 {
        chain_id: 1337,
        nonce,
        gas_limit: gas,
        max_fee_per_gas: 100_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to,
        value,
        access_list: Default::default(),
        input,
    }
}

/// Creates a contract with `init` from dev account `index` and waits for its receipt (which
/// must succeed): the contract's address and the block that holds the creation.
pub async fn deploy(url: &str, index: u32, init: Bytes) -> (Address, u64) {
    let deployer = dev_signer(index).expect("dev key");
    let nonce = rpc_u256(
        url,
        "eth_getTransactionCount",
        serde_json::json!([deployer.address(), "pending"]),
    )
    .await
    .to::<u64>();
    let raw = gigas_test_support::sign_raw(
        &deployer,
        eip1559(nonce, TxKind::Create, U256::ZERO, 200_000, init),
    );
    let answer = rpc(url, "eth_sendRawTransaction", serde_json::json!([raw])).await;
    let hash = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("deploy refused: {answer}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let receipt = rpc(url, "eth_getTransactionReceipt", serde_json::json!([hash])).await;
        if receipt["result"].is_object() {
            assert_eq!(
                receipt["result"]["status"], "0x1",
                "deploy failed: {receipt}"
            );
            let block = receipt["result"]["blockNumber"]
                .as_str()
                .and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok())
                .expect("the receipt's block");
            return (deployer.address().create(nonce), block);
        }
        assert!(Instant::now() < deadline, "no receipt for the deploy");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a load touched: accounts and (contract, slot) pairs.
#[derive(Debug, Default, Clone)]
pub struct Touched {
    /// Accounts.
    pub accounts: BTreeSet<Address>,
    /// Storage slots.
    pub slots: BTreeSet<(Address, U256)>,
}

/// A load of signed transactions from dev accounts 1..=4: transfers to fresh and known
/// accounts, and storage writes (new slots, overwrites, zeroing) to a contract it deploys.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// What was sent (and accepted).
    pub touched: Arc<Mutex<Touched>>,
    /// Transactions accepted.
    pub accepted: Arc<std::sync::atomic::AtomicU64>,
    senders: u32,
}

impl Load {
    /// Deploys the storage contract from dev account 5 (waiting for its receipt), then starts
    /// one task per sender.
    pub async fn start(url: &str, senders: u32, seed: u64) -> Self {
        let deployer = dev_signer(5).expect("dev key");
        let (contract, _) = deploy(url, 5, store_init_code()).await;
        let touched = Arc::new(Mutex::new(Touched::default()));
        touched.lock().unwrap().accounts.insert(contract);
        touched.lock().unwrap().accounts.insert(deployer.address());
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..senders {
            let signer = dev_signer(1 + i).expect("dev key");
            tasks.push(tokio::spawn(send_loop(
                url.to_string(),
                signer,
                contract,
                seed.wrapping_add(u64::from(i) * 7919),
                touched.clone(),
                stop.clone(),
                accepted.clone(),
            )));
        }
        Self {
            stop,
            tasks,
            touched,
            accepted,
            senders,
        }
    }

    /// Stops the senders, waits for them, then until the sequencer included every accepted
    /// transaction (pending nonces equal latest ones), so that its state is quiet.
    pub async fn stop(self, url: &str) -> Touched {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        let senders: Vec<Address> = (1..=self.senders)
            .map(|i| dev_signer(i).expect("dev key").address())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        for sender in senders {
            loop {
                let pending = rpc_u256(
                    url,
                    "eth_getTransactionCount",
                    serde_json::json!([sender, "pending"]),
                )
                .await;
                let latest = rpc_u256(
                    url,
                    "eth_getTransactionCount",
                    serde_json::json!([sender, "latest"]),
                )
                .await;
                if pending == latest {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the sequencer did not include {sender}'s transactions"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // A block being committed when the nonces were read may hold the last transactions:
        // two more blocks and it is served.
        let now = head(url).await;
        while head(url).await < now + 2 {
            assert!(
                Instant::now() < deadline,
                "the sequencer stopped producing blocks"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let touched = self.touched.lock().unwrap().clone();
        touched
    }
}

async fn send_loop(
    url: String,
    signer: PrivateKeySigner,
    contract: Address,
    seed: u64,
    touched: Arc<Mutex<Touched>>,
    stop: Arc<AtomicBool>,
    accepted: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let Some(mut nonce) = rpc(
        &url,
        "eth_getTransactionCount",
        serde_json::json!([signer.address(), "pending"]),
    )
    .await["result"]
        .as_str()
        .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
    else {
        return;
    };
    touched.lock().unwrap().accounts.insert(signer.address());
    while !stop.load(Ordering::Relaxed) {
        let r = next();
        let tx = if r % 3 == 0 {
            // A storage write: 16 slots, values including zero (a delete).
            let slot = U256::from(r % 16);
            let value = U256::from((r >> 8) % 4);
            let mut input = slot.to_be_bytes::<32>().to_vec();
            input.extend_from_slice(&value.to_be_bytes::<32>());
            touched.lock().unwrap().slots.insert((contract, slot));
            eip1559(
                nonce,
                TxKind::Call(contract),
                U256::ZERO,
                60_000,
                input.into(),
            )
        } else {
            // A transfer to one of 64 recipients (new ones at first, then known).
            let to = Address::left_padding_from(&(0x1000 + r % 64).to_be_bytes());
            touched.lock().unwrap().accounts.insert(to);
            eip1559(
                nonce,
                TxKind::Call(to),
                U256::from(r % 1000 + 1),
                21_000,
                Bytes::new(),
            )
        };
        let raw = gigas_test_support::sign_raw(&signer, tx);
        let answer = rpc(&url, "eth_sendRawTransaction", serde_json::json!([raw])).await;
        if answer["result"].is_string() {
            nonce += 1;
            accepted.fetch_add(1, Ordering::Relaxed);
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The sequencer's head number.
pub async fn head(url: &str) -> u64 {
    rpc_u256(url, "eth_blockNumber", serde_json::json!([]))
        .await
        .to::<u64>()
}

/// Waits until `check` is true, polling every 100 ms, for at most `limit`.
pub fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asserts that the full node at `node` serves the sequencer's `latest` balances, nonces,
/// code and slots for everything in `touched` (plus the sequencer's coinbase). Both must be
/// quiet (no transactions in flight) and the node at the sequencer's head.
pub async fn assert_same_state(node: &str, seq: &str, touched: &Touched) {
    assert_same_state_at(node, seq, touched, serde_json::json!("latest")).await;
}

/// [`assert_same_state`] at block `block` (a tag or a number): for a past block the full node
/// answers from its window of recent states.
pub async fn assert_same_state_at(
    node: &str,
    seq: &str,
    touched: &Touched,
    block: serde_json::Value,
) {
    let coinbase: Address = rpc(
        seq,
        "eth_getBlockByNumber",
        serde_json::json!(["latest", false]),
    )
    .await["result"]["miner"]
        .as_str()
        .expect("a miner")
        .parse()
        .expect("an address");
    let mut accounts = touched.accounts.clone();
    accounts.insert(coinbase);
    for address in &accounts {
        for method in ["eth_getBalance", "eth_getTransactionCount"] {
            let params = serde_json::json!([address, block]);
            assert_eq!(
                rpc_u256(node, method, params.clone()).await,
                rpc_u256(seq, method, params).await,
                "{method} of {address} at {block}"
            );
        }
        let params = serde_json::json!([address, block]);
        let ours = rpc(node, "eth_getCode", params.clone()).await;
        let theirs = rpc(seq, "eth_getCode", params).await;
        assert_eq!(
            ours["result"], theirs["result"],
            "code of {address} at {block}: {ours} vs {theirs}"
        );
    }
    for (address, slot) in &touched.slots {
        let params = serde_json::json!([address, alloy_primitives::B256::from(*slot), block]);
        assert_eq!(
            rpc_u256(node, "eth_getStorageAt", params.clone()).await,
            rpc_u256(seq, "eth_getStorageAt", params).await,
            "slot {slot} of {address} at {block}"
        );
    }
}

/// Every account and slot the load touched, proven by the full node at `block` with
/// `eth_getProof`: each proof verifies against the MPT root the node gives for that block
/// (`gigas_getStateRoot`), and proves the values the sequencer reads at that block.
pub async fn assert_proofs_at(node: &str, seq: &str, touched: &Touched, block: serde_json::Value) {
    use alloy_primitives::{keccak256, B256, KECCAK256_EMPTY};
    use alloy_trie::{proof::verify_proof, Nibbles, TrieAccount, EMPTY_ROOT_HASH};
    let roots = rpc(node, "gigas_getStateRoot", serde_json::json!([block])).await;
    let root: B256 = roots["result"]["stateRoot"]
        .as_str()
        .unwrap_or_else(|| panic!("a state root at {block}: {roots}"))
        .parse()
        .expect("a root");
    for address in &touched.accounts {
        let slots: Vec<B256> = touched
            .slots
            .iter()
            .filter(|(a, _)| a == address)
            .map(|(_, slot)| B256::from(*slot))
            .collect();
        let answer = rpc(
            node,
            "eth_getProof",
            serde_json::json!([address, slots, block]),
        )
        .await;
        let proof: alloy_rpc_types_eth::EIP1186AccountProofResponse =
            serde_json::from_value(answer["result"].clone())
                .unwrap_or_else(|e| panic!("eth_getProof of {address} at {block}: {e}: {answer}"));
        let params = serde_json::json!([address, block]);
        assert_eq!(
            proof.balance,
            rpc_u256(seq, "eth_getBalance", params.clone()).await,
            "balance of {address} at {block}"
        );
        assert_eq!(
            U256::from(proof.nonce),
            rpc_u256(seq, "eth_getTransactionCount", params).await,
            "nonce of {address} at {block}"
        );
        let absent = proof.nonce == 0
            && proof.balance.is_zero()
            && proof.code_hash == KECCAK256_EMPTY
            && proof.storage_hash == EMPTY_ROOT_HASH;
        let leaf = (!absent).then(|| {
            alloy_rlp::encode(TrieAccount::new(
                proof.nonce,
                proof.balance,
                proof.storage_hash,
                proof.code_hash,
            ))
        });
        verify_proof(
            root,
            Nibbles::unpack(keccak256(address)),
            leaf,
            &proof.account_proof,
        )
        .unwrap_or_else(|e| panic!("account proof of {address} at {block}: {e}"));
        assert_eq!(proof.storage_proof.len(), slots.len());
        for (slot, sp) in slots.iter().zip(&proof.storage_proof) {
            let params = serde_json::json!([address, slot, block]);
            let value = rpc_u256(seq, "eth_getStorageAt", params).await;
            assert_eq!(sp.value, value, "slot {slot} of {address} at {block}");
            verify_proof(
                proof.storage_hash,
                Nibbles::unpack(keccak256(slot)),
                (!value.is_zero()).then(|| alloy_rlp::encode(value)),
                &sp.proof,
            )
            .unwrap_or_else(|e| panic!("proof of slot {slot} of {address} at {block}: {e}"));
        }
    }
}

/// Waits (off the async threads) until the node at `url` serves block `target` or later.
pub async fn wait_for_block(url: &str, target: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let answer = rpc(url, "eth_blockNumber", serde_json::json!([])).await;
        let n = answer["result"]
            .as_str()
            .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok());
        if n.is_some_and(|n| n >= target) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not reach block {target} (at {n:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A running nginx (Debian's `nginx-light`), stopped when dropped.
pub struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts nginx in the foreground with everything under `dir`: `http` is added to its
/// `http` block, and `servers(port)` gives the server blocks, the first listening on `port`
/// (more may listen on ports of their own). Returns it and `http://127.0.0.1:port`.
pub fn nginx(dir: &Path, http: &str, servers: impl FnOnce(u16) -> String) -> (Nginx, String) {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("nginx is not installed: scripts/prerequisites.sh tests installs it (Debian's nginx-light)");
    let port = gigas_launch::free_port().unwrap();
    for sub in ["cache", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let d = dir.display();
    let servers = servers(port);
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    log_format cache '$request $status $upstream_cache_status';
    access_log {d}/access.log cache;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    {http}
    {servers}
}}
"#
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let url = format!("http://127.0.0.1:{port}");
    wait_until(Duration::from_secs(10), "nginx to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (Nginx(child), url)
}
