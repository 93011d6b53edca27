//! Sending at a target rate (JSON-RPC batches over HTTP, a bounded number in flight) and
//! watching inclusion (a `newHeads` subscription; each new block's transaction hashes fetched
//! once and matched to send times).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use alloy_primitives::{B256, U64};
use eyre::{bail, eyre, Result, WrapErr};
use futures::{SinkExt as _, StreamExt as _};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::rpc::{Answer, Rpc};
use super::sign::SignedTx;

/// First pause before re-sending transactions the node refused because it was full; it
/// doubles with each try up to [`RETRY_PAUSE_MAX`], so that retries never multiply the load
/// on a node that is behind (every try costs it a sender recovery).
const RETRY_PAUSE: Duration = Duration::from_millis(50);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// What became of one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not answered yet (or being retried after a full pool or a transport error).
    Waiting,
    /// The node returned its hash.
    Accepted,
    /// Refused for a reason other than a full pool.
    Rejected,
    /// Still refused as the pool was full (or unreachable) when retries ran out.
    GaveUp,
}

/// One transaction of the current step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxTrack {
    /// Seconds since the run's origin at its first send (NaN: not sent).
    pub(crate) sent: f64,
    /// Seconds since the origin when a new head holding it was seen (NaN: not yet).
    pub(crate) included: f64,
    /// What the node answered.
    pub(crate) outcome: Outcome,
}

/// One second of the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Second {
    pub(crate) submitted: u64,
    pub(crate) accepted: u64,
    pub(crate) rejected: u64,
    pub(crate) included: u64,
    /// Inclusion latencies (ms) of the transactions included in this second.
    pub(crate) latencies_ms: Vec<f32>,
    pub(crate) blocks: u64,
}

/// A block as the head subscription showed it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head {
    pub(crate) number: u64,
    /// Seconds since the origin when its head arrived.
    pub(crate) seen: f64,
    /// Transactions in it.
    pub(crate) txs: usize,
}

/// Refusals of one reason.
#[derive(Debug, Clone)]
pub(crate) struct Refusals {
    pub(crate) count: u64,
    /// The pool was full or busy (or the node unreachable): the transaction is retried.
    pub(crate) backpressure: bool,
    pub(crate) example: String,
}

/// Everything observed, shared by the senders, the head watcher and the reports.
#[derive(Debug)]
pub(crate) struct Tracker {
    origin: Instant,
    /// Id of the current step's first transaction.
    base: u64,
    pub(crate) txs: Vec<TxTrack>,
    /// Hashes sent or to be sent and not yet seen in a block, by id.
    by_hash: HashMap<B256, u64>,
    pub(crate) seconds: Vec<Second>,
    pub(crate) heads: Vec<Head>,
    /// Refusals during the current step, by reason.
    pub(crate) refusals: BTreeMap<String, Refusals>,
    /// Transactions included that this run did not send.
    pub(crate) foreign: u64,
    /// Milliseconds from posting a batch to its answer, during the current step.
    pub(crate) answer_ms: Vec<f32>,
}

impl Tracker {
    pub(crate) fn new(origin: Instant) -> Self {
        Self {
            origin,
            base: 0,
            txs: Vec::new(),
            by_hash: HashMap::new(),
            seconds: Vec::new(),
            heads: Vec::new(),
            refusals: BTreeMap::new(),
            foreign: 0,
            answer_ms: Vec::new(),
        }
    }

    /// Seconds since the origin.
    pub(crate) fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    fn second(&mut self, at: f64) -> &mut Second {
        let i = at.max(0.0) as usize;
        if self.seconds.len() <= i {
            self.seconds.resize_with(i + 1, Second::default);
        }
        &mut self.seconds[i]
    }

    /// Starts a step of `hashes`, ids `base..`.
    pub(crate) fn begin_step(&mut self, base: u64, hashes: impl Iterator<Item = B256>) {
        self.base = base;
        self.txs.clear();
        self.refusals.clear();
        self.answer_ms.clear();
        for (i, hash) in hashes.enumerate() {
            self.by_hash.insert(hash, base + i as u64);
            self.txs.push(TxTrack {
                sent: f64::NAN,
                included: f64::NAN,
                outcome: Outcome::Waiting,
            });
        }
    }

    fn track(&mut self, id: u64) -> Option<&mut TxTrack> {
        let i = id.checked_sub(self.base)?;
        self.txs.get_mut(usize::try_from(i).ok()?)
    }

    fn sent(&mut self, ids: &[u64], at: f64) {
        let mut first = 0;
        for &id in ids {
            if let Some(t) = self.track(id) {
                if t.sent.is_nan() {
                    t.sent = at;
                    first += 1;
                }
            }
        }
        self.second(at).submitted += first;
    }

    fn accepted(&mut self, id: u64, at: f64) {
        if let Some(t) = self.track(id) {
            if t.outcome == Outcome::Waiting {
                t.outcome = Outcome::Accepted;
                self.second(at).accepted += 1;
            }
        }
    }

    /// Records a refusal; returns whether the transaction is to be retried.
    fn refused(&mut self, id: u64, message: &str, at: f64) -> bool {
        let (reason, backpressure) = reason_of(message);
        let entry = self.refusals.entry(reason).or_insert_with(|| Refusals {
            count: 0,
            backpressure,
            example: message.to_string(),
        });
        entry.count += 1;
        self.second(at).rejected += 1;
        if !backpressure {
            if let Some(t) = self.track(id) {
                t.outcome = Outcome::Rejected;
            }
        }
        backpressure
    }

    fn gave_up(&mut self, id: u64) {
        if let Some(t) = self.track(id) {
            if t.outcome == Outcome::Waiting {
                t.outcome = Outcome::GaveUp;
            }
        }
    }

    /// A block seen at `seen` holding `hashes`.
    fn head(&mut self, number: u64, seen: f64, hashes: &[B256]) {
        self.heads.push(Head {
            number,
            seen,
            txs: hashes.len(),
        });
        let mut included = 0;
        let mut latencies = Vec::new();
        for hash in hashes {
            let Some(id) = self.by_hash.remove(hash) else {
                self.foreign += 1;
                continue;
            };
            included += 1;
            if let Some(t) = self.track(id) {
                t.included = seen;
                // A transaction can be in a block before its answer arrives.
                if t.outcome == Outcome::Waiting {
                    t.outcome = Outcome::Accepted;
                }
                if !t.sent.is_nan() {
                    latencies.push(((seen - t.sent) * 1e3) as f32);
                }
            }
        }
        let second = self.second(seen);
        second.blocks += 1;
        second.included += included;
        second.latencies_ms.extend(latencies);
    }

    /// Accepted transactions of the current step not yet seen in a block.
    pub(crate) fn step_outstanding(&self) -> usize {
        self.txs
            .iter()
            .filter(|t| t.outcome != Outcome::Rejected && t.included.is_nan() && !t.sent.is_nan())
            .count()
    }

    /// The newest block number seen.
    pub(crate) fn head_number(&self) -> Option<u64> {
        self.heads.last().map(|h| h.number)
    }
}

/// The short label of a refusal and whether it is backpressure: the leading words of the
/// node's message, before the numbers.
///
/// Backpressure is the pool full or busy, the node unreachable, or "nonce too high": this
/// generator sends every sender's nonces without gaps, so that answer means the sender
/// already has the pool's per-sender window (`--txpool.max-per-sender`, 256) waiting, which
/// the hottest Zipf-Mandelbrot senders reach when blocks fall behind (about 2% of all
/// transactions come from one account). Such transactions are sent again; a true gap would
/// never be accepted and fails its step through the latency criterion.
pub(crate) fn reason_of(message: &str) -> (String, bool) {
    let pool_full = message.contains("txpool is full") || message.contains("the pool is full");
    let sender_full = message.starts_with("nonce too high");
    let backpressure = pool_full
        || sender_full
        || message.starts_with("txpool is busy")
        || message.starts_with("transport:");
    let head = message.split(':').next().unwrap_or(message).trim();
    let label = if pool_full && !head.contains("full") {
        format!("{head} (pool full)")
    } else if sender_full {
        format!("{head} (sender's pool window full)")
    } else {
        head.to_string()
    };
    (label, backpressure)
}

/// Locks the tracker (a panicked holder left nothing half-written that matters here).
pub(crate) fn lock(tracker: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    tracker.lock().unwrap_or_else(|p| p.into_inner())
}

/// The JSON-RPC batch body sending `ids`.
fn batch_body(txs: &[SignedTx], base: u64, ids: &[u64]) -> String {
    let per = txs.first().map_or(256, |t| t.hex.len() + 80);
    let mut body = String::with_capacity(2 + ids.len() * per);
    body.push('[');
    for (k, id) in ids.iter().enumerate() {
        if k > 0 {
            body.push(',');
        }
        let hex = usize::try_from(id - base)
            .ok()
            .and_then(|i| txs.get(i))
            .map_or("0x", |t| t.hex.as_str());
        let _ = write!(
            body,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_sendRawTransaction","params":["{hex}"]}}"#
        );
    }
    body.push(']');
    body
}

/// How one step is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// Transactions per second.
    pub(crate) rate: f64,
    /// Transactions per JSON-RPC batch.
    pub(crate) batch: usize,
    /// Batches in flight at most.
    pub(crate) in_flight: usize,
    /// How long refused-as-full transactions are retried after their first send.
    pub(crate) retry_for: Duration,
}

/// Sends `txs` (ids `base..`) at `pace`: batch `k` is due at `k * batch / rate` seconds after
/// the start, waits for a free in-flight slot, and is answered in its own task. Returns once
/// the last batch is on its way, with the tasks still answering.
pub(crate) async fn send_step(
    transport: &Transport,
    tracker: &Arc<Mutex<Tracker>>,
    txs: &Arc<Vec<SignedTx>>,
    base: u64,
    pace: Pace,
) -> Result<JoinSet<()>> {
    let slots = Arc::new(Semaphore::new(pace.in_flight.max(1)));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let batch = pace.batch.max(1);
    for first in (0..txs.len()).step_by(batch) {
        let due = start + Duration::from_secs_f64(first as f64 / pace.rate);
        tokio::time::sleep_until(due).await;
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|_| eyre!("the in-flight limit closed"))?;
        let ids: Vec<u64> = (first..(first + batch).min(txs.len()))
            .map(|i| base + i as u64)
            .collect();
        tasks.spawn(post_batch(
            transport.clone(),
            Arc::clone(tracker),
            Arc::clone(txs),
            base,
            ids,
            pace.retry_for,
            permit,
        ));
        while let Some(done) = tasks.try_join_next() {
            done.wrap_err("a sending task panicked")?;
        }
    }
    Ok(tasks)
}

async fn post_batch(
    transport: Transport,
    tracker: Arc<Mutex<Tracker>>,
    txs: Arc<Vec<SignedTx>>,
    base: u64,
    mut ids: Vec<u64>,
    retry_for: Duration,
    _slot: OwnedSemaphorePermit,
) {
    let retry_until = Instant::now() + retry_for;
    let mut first = true;
    let mut pause = RETRY_PAUSE;
    loop {
        let body = batch_body(&txs, base, &ids);
        if first {
            let mut t = lock(&tracker);
            let now = t.now();
            t.sent(&ids, now);
            first = false;
        }
        let posted = Instant::now();
        let answers = transport.send(body, &ids).await;
        let answer_ms = posted.elapsed().as_secs_f64() * 1e3;
        let mut retry = Vec::new();
        {
            let mut t = lock(&tracker);
            let now = t.now();
            t.answer_ms.push(answer_ms as f32);
            match answers {
                Ok(mut answers) => {
                    for &id in &ids {
                        let expected = usize::try_from(id - base)
                            .ok()
                            .and_then(|i| txs.get(i))
                            .map(|t| t.hash);
                        match answers.remove(&id) {
                            Some(Ok(hash)) if Some(hash) == expected => t.accepted(id, now),
                            Some(Ok(hash)) => {
                                t.refused(id, &format!("returned hash {hash} differs"), now);
                            }
                            Some(Err(message)) => {
                                // "already known": an earlier try reached the pool before
                                // its answer was lost.
                                if message.starts_with("already known") {
                                    t.accepted(id, now);
                                } else if t.refused(id, &message, now) {
                                    retry.push(id);
                                }
                            }
                            None => {
                                if t.refused(id, "transport: no answer in the batch", now) {
                                    retry.push(id);
                                }
                            }
                        }
                    }
                }
                Err(message) => {
                    for &id in &ids {
                        if t.refused(id, &message, now) {
                            retry.push(id);
                        }
                    }
                }
            }
            if !retry.is_empty() && Instant::now() >= retry_until {
                for &id in &retry {
                    t.gave_up(id);
                }
                return;
            }
        }
        if retry.is_empty() {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_PAUSE_MAX);
        ids = retry;
    }
}

/// The answers of a batch by id: the hash, or the error message. A response that is not an
/// array (the whole batch refused) answers every call with its error.
fn parse_answers(bytes: &[u8]) -> Result<HashMap<u64, Result<B256, String>>, String> {
    match serde_json::from_slice::<Vec<Answer<B256>>>(bytes) {
        Ok(list) => Ok(list
            .into_iter()
            .filter_map(|a| {
                let id = a.id?;
                Some(match (a.result, a.error) {
                    (_, Some(e)) => (id, Err(e.message)),
                    (Some(hash), None) => (id, Ok(hash)),
                    (None, None) => (id, Err("null result".to_string())),
                })
            })
            .collect()),
        Err(_) => match serde_json::from_slice::<Answer<B256>>(bytes) {
            Ok(Answer { error: Some(e), .. }) => Err(e.message),
            _ => Err(format!(
                "unexpected batch answer: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )),
        },
    }
}

/// How batches reach the node.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// One HTTP POST per batch, over a pool of kept-alive connections.
    Http(Rpc),
    /// Batches spread round-robin over a few WebSocket connections.
    Ws(Arc<WsPool>),
}

impl Transport {
    /// Sends a batch body holding `ids`; its answers by id (or why none came).
    async fn send(&self, body: String, ids: &[u64]) -> Result<Answers, String> {
        match self {
            Self::Http(rpc) => match rpc.post(body).await {
                Ok(bytes) => parse_answers(&bytes),
                Err(e) => Err(format!("transport: {e}")),
            },
            Self::Ws(pool) => pool.send(body, ids).await,
        }
    }
}

type Answers = HashMap<u64, Result<B256, String>>;
/// Where a batch's answers go.
type Reply = tokio::sync::oneshot::Sender<Result<Answers, String>>;

struct WsRequest {
    body: String,
    ids: Vec<u64>,
    reply: Reply,
}

/// WebSocket connections that carry batches; answers are matched to their batch by id.
#[derive(Debug)]
pub(crate) struct WsPool {
    connections: Vec<mpsc::Sender<WsRequest>>,
    next: std::sync::atomic::AtomicUsize,
}

impl WsPool {
    /// Opens `n` connections to `url`.
    pub(crate) async fn connect(url: &str, n: usize) -> Result<Self> {
        let mut connections = Vec::with_capacity(n.max(1));
        for _ in 0..n.max(1) {
            let (socket, _) = tokio_tungstenite::connect_async(url)
                .await
                .wrap_err_with(|| format!("connecting to {url}"))?;
            let (tx, rx) = mpsc::channel(1024);
            tokio::spawn(ws_connection(socket, rx));
            connections.push(tx);
        }
        Ok(Self {
            connections,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    async fn send(&self, body: String, ids: &[u64]) -> Result<Answers, String> {
        use std::sync::atomic::Ordering;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = WsRequest {
            body,
            ids: ids.to_vec(),
            reply,
        };
        self.connections[i]
            .send(request)
            .await
            .map_err(|_| "transport: the WebSocket connection closed".to_string())?;
        answer
            .await
            .map_err(|_| "transport: the WebSocket connection closed".to_string())?
    }
}

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One connection: writes batches as they come, reads answers as they come, and hands each
/// batch's answers to its sender (found by any of its ids; a whole-batch error, which has no
/// id, goes to the oldest batch waiting).
async fn ws_connection(socket: WsStream, mut requests: mpsc::Receiver<WsRequest>) {
    let (mut sink, mut stream) = socket.split();
    let mut batch_of: HashMap<u64, u64> = HashMap::new();
    let mut waiting: BTreeMap<u64, (Vec<u64>, Reply)> = BTreeMap::new();
    let mut next_batch = 0u64;
    let failure = loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(r) = request else { break None };
                let batch = next_batch;
                next_batch += 1;
                for id in &r.ids {
                    batch_of.insert(*id, batch);
                }
                if let Err(e) = sink.send(Message::text(r.body)).await {
                    let _ = r.reply.send(Err(format!("transport: {e}")));
                    break Some(format!("transport: {e}"));
                }
                waiting.insert(batch, (r.ids, r.reply));
            }
            message = stream.next() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | None => {
                        break Some("transport: the node closed the WebSocket".to_string())
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break Some(format!("transport: {e}")),
                };
                let answers = parse_answers(text.as_bytes());
                let batch = match &answers {
                    Ok(map) => map.keys().find_map(|id| batch_of.get(id).copied()),
                    Err(_) => waiting.keys().next().copied(),
                };
                if let Some((ids, reply)) = batch.and_then(|b| waiting.remove(&b)) {
                    for id in &ids {
                        batch_of.remove(id);
                    }
                    let _ = reply.send(answers);
                }
            }
        }
    };
    if let Some(message) = failure {
        for (_, (_, reply)) in waiting {
            let _ = reply.send(Err(message.clone()));
        }
    }
}

/// Follows new heads over WebSocket until `stop`, recording each block (and any it skipped)
/// with the instant its head arrived. Blocks up to `after` are not this run's.
pub(crate) async fn watch_heads(
    ws_url: String,
    rpc: Rpc,
    tracker: Arc<Mutex<Tracker>>,
    origin: Instant,
    after: u64,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url.as_str())
        .await
        .wrap_err_with(|| format!("connecting to {ws_url}"))?;
    socket
        .send(Message::text(
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#,
        ))
        .await
        .wrap_err("subscribing to newHeads")?;
    // Reading and timestamping heads stays apart from fetching their blocks, so that a slow
    // fetch never delays the instant the next head is seen.
    let (heads, mut queue) = mpsc::unbounded_channel::<(u64, f64)>();
    let fetcher = tokio::spawn(async move {
        let mut last = after;
        while let Some((number, seen)) = queue.recv().await {
            while last < number {
                let b = last + 1;
                let hashes = fetch_block(&rpc, b).await?;
                lock(&tracker).head(b, seen, &hashes);
                last = b;
            }
        }
        Ok::<(), eyre::Report>(())
    });
    let result = loop {
        tokio::select! {
            _ = stop.changed() => break Ok(()),
            message = socket.next() => {
                let seen = origin.elapsed().as_secs_f64();
                match message {
                    Some(Ok(Message::Text(text))) => {
                        match head_number(text.as_str()) {
                            Ok(Some(number)) => {
                                if heads.send((number, seen)).is_err() {
                                    break Err(eyre!("the block fetcher stopped"));
                                }
                            }
                            Ok(None) => {}
                            Err(e) => break Err(e),
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        break Err(eyre!("the node closed the head subscription: {frame:?}"))
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Err(eyre!("head subscription: {e}")),
                    None => break Err(eyre!("the head subscription ended")),
                }
            }
        }
    };
    drop(heads);
    let fetched = fetcher.await.wrap_err("the block fetcher panicked")?;
    result.and(fetched)
}

/// A block's hashes, asked again a few times if the node does not serve it yet.
async fn fetch_block(rpc: &Rpc, number: u64) -> Result<Vec<B256>> {
    for _ in 0..50 {
        if let Some(hashes) = rpc.block_hashes(number).await? {
            return Ok(hashes);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("the node announced block {number} but does not serve it")
}

/// The block number of a `newHeads` notification (None for other messages, such as the
/// subscription's id).
fn head_number(text: &str) -> Result<Option<u64>> {
    let value: serde_json::Value =
        serde_json::from_str(text).wrap_err("head subscription: not JSON")?;
    if let Some(error) = value.get("error") {
        bail!("eth_subscribe newHeads: {error}");
    }
    let Some(number) = value.pointer("/params/result/number") else {
        return Ok(None);
    };
    let number: U64 = serde_json::from_value(number.clone())
        .wrap_err("head subscription: a head without a block number")?;
    Ok(Some(number.to()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_labelled_by_their_leading_words() {
        assert_eq!(
            reason_of("nonce too low: next nonce 72, tx nonce 71"),
            ("nonce too low".to_string(), false)
        );
        assert_eq!(
            reason_of("txpool is full"),
            ("txpool is full".to_string(), true)
        );
        let (label, backpressure) = reason_of(
            "transaction underpriced: the pool is full and its cheapest evictable transaction pays a tip of 1, this one 1",
        );
        assert_eq!(label, "transaction underpriced (pool full)");
        assert!(backpressure);
        assert!(reason_of("txpool is busy: the sender recovery queue is full, retry later").1);
        assert_eq!(
            reason_of("nonce too high: next nonce 21747, tx nonce 21872, highest accepted 21866"),
            (
                "nonce too high (sender's pool window full)".to_string(),
                true
            )
        );
        assert!(
            !reason_of("insufficient funds for gas * price + value: address 0x1 have 0 want 1").1
        );
    }

    #[test]
    fn a_head_notification_gives_its_number() {
        let text = r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"number":"0x2a","hash":"0x00"}}}"#;
        assert_eq!(head_number(text).unwrap(), Some(42));
        assert_eq!(
            head_number(r#"{"jsonrpc":"2.0","id":1,"result":"0xabc"}"#).unwrap(),
            None
        );
        assert!(
            head_number(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#)
                .is_err()
        );
    }

    #[test]
    fn batch_answers_by_id_and_whole_batch_errors() {
        let h = B256::repeat_byte(7);
        let ok = format!(
            r#"[{{"jsonrpc":"2.0","id":5,"result":"{h}"}},{{"jsonrpc":"2.0","id":6,"error":{{"code":-32000,"message":"nonce too low: next nonce 1, tx nonce 0"}}}}]"#
        );
        let answers = parse_answers(ok.as_bytes()).unwrap();
        assert_eq!(answers[&5], Ok(h));
        assert!(answers[&6]
            .as_ref()
            .unwrap_err()
            .starts_with("nonce too low"));
        let whole =
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}"#;
        assert_eq!(
            parse_answers(whole.as_bytes()).unwrap_err(),
            "batch too large"
        );
    }
}
