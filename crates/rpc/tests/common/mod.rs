//! A test double of the storage side: an in-memory chain of a few blocks of real signed
//! transactions, with a pool that checks nonces, behind the real [`Backend`] trait.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{
    Receipt, ReceiptEnvelope, ReceiptWithBloom, SignableTransaction, Transaction as _, TxEip1559,
    TxEnvelope,
};
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{
    address, b256, Address, Bytes, Log as PrimitiveLog, LogData, TxKind, B256, U256,
};
use alloy_rpc_types_eth::state::EvmOverrides;
use alloy_rpc_types_eth::{
    Block, BlockTransactions, Filter, Header, Log, Transaction, TransactionReceipt,
    TransactionRequest,
};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Revert, SolError};
use gigas_rpc::{
    Backend, FeeHistoryBlock, PrestateAccount, PrestateTrace, RpcError, SubscriptionBuffers,
    SubscriptionHub,
};

pub const CHAIN_ID: u64 = 1337;
pub const CLIENT: &str = "gigas-test/1.0";
pub const BASE_FEE: u64 = 7;
pub const TIP: u128 = 2;
pub const GAS_PRICE: u128 = BASE_FEE as u128 + TIP;
pub const VALUE: u64 = 1000;
pub const INITIAL: u64 = 1_000_000_000_000;
/// The address every transaction's log comes from.
pub const EMITTER: Address = address!("0x00000000000000000000000000000000000e1100");
/// The first topic of every log.
pub const TOPIC: B256 = b256!("0x1111111111111111111111111111111111111111111111111111111111111111");
/// A contract with code and one storage slot.
pub const CONTRACT: Address = address!("0x00000000000000000000000000000000000c0de0");
pub const RECIPIENT: Address = address!("0x00000000000000000000000000000000000b0b00");
/// Calldata that makes `eth_call` revert with `Error("boom")`.
pub const REVERT_INPUT: [u8; 2] = [0xde, 0xad];

pub fn contract_code() -> Bytes {
    Bytes::from_static(&[0x60, 0x01, 0x60, 0x00, 0x55])
}

pub fn signer() -> PrivateKeySigner {
    // A fixed key, so that addresses in failures are stable from run to run.
    PrivateKeySigner::from_bytes(&B256::with_last_byte(0x42)).expect("valid fixed key")
}

/// Signs an EIP-1559 transfer of VALUE to RECIPIENT.
pub fn signed_transfer(signer: &PrivateKeySigner, nonce: u64) -> TxEnvelope {
    let tx = TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: GAS_PRICE,
        max_priority_fee_per_gas: TIP,
        to: TxKind::Call(RECIPIENT),
        value: U256::from(VALUE),
        access_list: Default::default(),
        input: Bytes::new(),
    };
    let sig = signer
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing with a local key");
    TxEnvelope::from(tx.into_signed(sig))
}

struct Stored {
    header: Header,
    txs: Vec<Transaction>,
    receipts: Vec<TransactionReceipt>,
    /// Balances after this block.
    balances: HashMap<Address, U256>,
    /// Nonces after this block.
    nonces: HashMap<Address, u64>,
}

struct Chain {
    blocks: Vec<Stored>,
    by_hash: HashMap<B256, u64>,
    tx_index: HashMap<B256, (u64, usize)>,
    pool: Vec<(Address, TxEnvelope)>,
    pool_nonces: HashMap<Address, u64>,
}

/// The test backend. `mine` seals the pool into a block and publishes it.
pub struct TestBackend {
    chain: Mutex<Chain>,
    pub hub: SubscriptionHub,
}

impl TestBackend {
    /// A chain of block 0 (genesis) and `blocks` more, each with one transfer from `signer()`.
    pub fn new(blocks: u64, buffers: SubscriptionBuffers) -> Arc<Self> {
        let from = signer().address();
        let mut balances = HashMap::new();
        balances.insert(from, U256::from(INITIAL));
        balances.insert(CONTRACT, U256::from(5));
        let genesis = Header::new(alloy_consensus::Header {
            number: 0,
            gas_limit: 30_000_000,
            timestamp: 1_000,
            base_fee_per_gas: Some(BASE_FEE),
            ..Default::default()
        });
        let mut by_hash = HashMap::new();
        by_hash.insert(genesis.hash, 0);
        let backend = Arc::new(TestBackend {
            chain: Mutex::new(Chain {
                blocks: vec![Stored {
                    header: genesis,
                    txs: Vec::new(),
                    receipts: Vec::new(),
                    balances,
                    nonces: HashMap::new(),
                }],
                by_hash,
                tx_index: HashMap::new(),
                pool: Vec::new(),
                pool_nonces: HashMap::new(),
            }),
            hub: SubscriptionHub::new(buffers),
        });
        let key = signer();
        for n in 0..blocks {
            let tx = signed_transfer(&key, n);
            backend.lock().pool.push((from, tx));
            backend.mine();
        }
        backend
    }

    fn lock(&self) -> MutexGuard<'_, Chain> {
        // A panicking test thread poisons the lock; the data is still usable for the others.
        self.chain.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seals every pooled transaction into a new block, publishes its head and logs, and
    /// returns its number.
    pub fn mine(&self) -> u64 {
        let (header, logs) = {
            let mut chain = self.lock();
            let parent = chain.blocks.last().expect("genesis exists");
            let number = parent.header.inner.number + 1;
            let parent_hash = parent.header.hash;
            let mut balances = parent.balances.clone();
            let mut nonces = parent.nonces.clone();
            let pool = std::mem::take(&mut chain.pool);
            let inner = alloy_consensus::Header {
                number,
                parent_hash,
                gas_limit: 30_000_000,
                gas_used: 21_000 * pool.len() as u64,
                timestamp: 1_000 + number,
                base_fee_per_gas: Some(BASE_FEE),
                // Distinct per block even when empty, so every hash differs.
                extra_data: Bytes::from(number.to_be_bytes().to_vec()),
                ..Default::default()
            };
            let header = Header::new(inner);
            let mut txs = Vec::new();
            let mut receipts = Vec::new();
            let mut block_logs = Vec::new();
            let mut cumulative = 0;
            for (i, (from, envelope)) in pool.into_iter().enumerate() {
                let hash = *envelope.tx_hash();
                let cost = U256::from(VALUE) + U256::from(21_000u64 * GAS_PRICE as u64);
                let balance = balances.entry(from).or_default();
                *balance = balance.saturating_sub(cost);
                *balances.entry(RECIPIENT).or_default() += U256::from(VALUE);
                *nonces.entry(from).or_default() += 1;
                cumulative += 21_000;
                let log = Log {
                    inner: PrimitiveLog {
                        address: EMITTER,
                        data: LogData::new_unchecked(
                            vec![TOPIC, B256::from(U256::from(number))],
                            Bytes::from(hash.to_vec()),
                        ),
                    },
                    block_hash: Some(header.hash),
                    block_number: Some(number),
                    block_timestamp: Some(header.inner.timestamp),
                    transaction_hash: Some(hash),
                    transaction_index: Some(i as u64),
                    log_index: Some(i as u64),
                    removed: false,
                };
                block_logs.push(log.clone());
                let receipt = Receipt {
                    status: true.into(),
                    cumulative_gas_used: cumulative,
                    logs: vec![log],
                };
                let bloom = receipt.bloom_slow();
                receipts.push(TransactionReceipt {
                    inner: ReceiptEnvelope::Eip1559(ReceiptWithBloom {
                        receipt,
                        logs_bloom: bloom,
                    }),
                    transaction_hash: hash,
                    transaction_index: Some(i as u64),
                    block_hash: Some(header.hash),
                    block_number: Some(number),
                    gas_used: 21_000,
                    effective_gas_price: GAS_PRICE,
                    blob_gas_used: None,
                    blob_gas_price: None,
                    from,
                    to: envelope.to(),
                    contract_address: None,
                });
                chain.tx_index.insert(hash, (number, i));
                txs.push(Transaction {
                    inner: alloy_consensus::transaction::Recovered::new_unchecked(envelope, from),
                    block_hash: Some(header.hash),
                    block_number: Some(number),
                    transaction_index: Some(i as u64),
                    effective_gas_price: Some(GAS_PRICE),
                    block_timestamp: Some(header.inner.timestamp),
                });
            }
            chain.by_hash.insert(header.hash, number);
            chain.blocks.push(Stored {
                header: header.clone(),
                txs,
                receipts,
                balances,
                nonces,
            });
            (header, block_logs)
        };
        let number = header.inner.number;
        self.hub.publish_head(header);
        self.hub.publish_logs(logs);
        number
    }

    pub fn head_hash(&self) -> B256 {
        self.lock()
            .blocks
            .last()
            .map(|b| b.header.hash)
            .unwrap_or_default()
    }

    pub fn block_hash(&self, number: u64) -> B256 {
        self.lock().blocks[number as usize].header.hash
    }

    pub fn tx_hash(&self, number: u64) -> B256 {
        self.lock().blocks[number as usize].txs[0]
            .inner
            .tx_hash()
            .to_owned()
    }

    fn stored<T>(&self, number: u64, f: impl FnOnce(&Stored) -> T) -> Option<T> {
        self.lock().blocks.get(number as usize).map(f)
    }
}

impl Backend for TestBackend {
    fn client_version(&self) -> String {
        CLIENT.to_string()
    }

    fn chain_id(&self) -> u64 {
        CHAIN_ID
    }

    fn latest(&self) -> u64 {
        self.lock().blocks.len() as u64 - 1
    }

    fn block_number(&self, hash: B256) -> Result<Option<u64>, RpcError> {
        Ok(self.lock().by_hash.get(&hash).copied())
    }

    fn block(&self, number: u64, full: bool) -> Result<Option<Block>, RpcError> {
        Ok(self.stored(number, |b| {
            let transactions = if full {
                BlockTransactions::Full(b.txs.clone())
            } else {
                BlockTransactions::Hashes(b.txs.iter().map(|t| *t.inner.tx_hash()).collect())
            };
            Block::new(b.header.clone(), transactions)
        }))
    }

    fn balance(&self, address: Address, at: u64) -> Result<U256, RpcError> {
        self.stored(at, |b| {
            b.balances.get(&address).copied().unwrap_or_default()
        })
        .ok_or(RpcError::HeaderNotFound)
    }

    fn nonce(&self, address: Address, at: u64) -> Result<u64, RpcError> {
        self.stored(at, |b| b.nonces.get(&address).copied().unwrap_or_default())
            .ok_or(RpcError::HeaderNotFound)
    }

    fn pending_nonce(&self, address: Address) -> Result<u64, RpcError> {
        let chain = self.lock();
        let mined = chain
            .blocks
            .last()
            .and_then(|b| b.nonces.get(&address).copied())
            .unwrap_or_default();
        Ok(chain
            .pool_nonces
            .get(&address)
            .copied()
            .unwrap_or(mined)
            .max(mined))
    }

    fn code(&self, address: Address, _at: u64) -> Result<Bytes, RpcError> {
        Ok(if address == CONTRACT {
            contract_code()
        } else {
            Bytes::new()
        })
    }

    fn storage(&self, address: Address, slot: B256, _at: u64) -> Result<B256, RpcError> {
        Ok(if address == CONTRACT && slot == B256::with_last_byte(1) {
            B256::with_last_byte(0x99)
        } else {
            B256::ZERO
        })
    }

    /// Reverts on REVERT_INPUT; answers an overridden code of `to`, else the block-override
    /// number, else the balance of `to` at `at` (so tests see which inputs arrived).
    fn call(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<Bytes, RpcError> {
        let input = request.input.input().cloned().unwrap_or_default();
        if input.as_ref() == REVERT_INPUT {
            return Err(RpcError::revert(Bytes::from(
                Revert::from("boom").abi_encode(),
            )));
        }
        let to = request.to.and_then(|k| k.to().copied()).unwrap_or_default();
        if let Some(code) = overrides
            .state
            .as_ref()
            .and_then(|s| s.get(&to))
            .and_then(|acct| acct.code.clone())
        {
            return Ok(code);
        }
        if let Some(number) = overrides.block.as_ref().and_then(|b| b.number) {
            return Ok(Bytes::from(B256::from(number).to_vec()));
        }
        Ok(Bytes::from(B256::from(self.balance(to, at)?).to_vec()))
    }

    fn estimate_gas(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<u64, RpcError> {
        let len = request.input.input().map(|i| i.len()).unwrap_or(0) as u64;
        self.call(request, at, overrides)?;
        Ok(21_000 + 16 * len)
    }

    fn gas_price(&self) -> Result<U256, RpcError> {
        Ok(U256::from(GAS_PRICE))
    }

    fn max_priority_fee(&self) -> Result<U256, RpcError> {
        Ok(U256::from(TIP))
    }

    fn fee_history_block(
        &self,
        _number: u64,
        percentiles: Option<&[f64]>,
    ) -> Result<Option<FeeHistoryBlock>, RpcError> {
        Ok(Some(FeeHistoryBlock {
            base_fee: BASE_FEE,
            gas_used: 1,
            gas_limit: 2,
            next_base_fee: BASE_FEE,
            reward: percentiles.map(|p| vec![TIP; p.len()]),
        }))
    }

    fn send_raw_transaction(
        &self,
        raw: Bytes,
    ) -> impl Future<Output = Result<B256, RpcError>> + Send {
        let result = (|| {
            let envelope = TxEnvelope::decode_2718(&mut raw.as_ref()).map_err(|e| {
                RpcError::InvalidParams(format!("failed to decode signed transaction: {e}"))
            })?;
            let from = envelope
                .recover_signer()
                .map_err(|_| RpcError::TxRejected("invalid sender".into()))?;
            if envelope.chain_id() != Some(CHAIN_ID) {
                return Err(RpcError::TxRejected("invalid chain id".into()));
            }
            let next = self.pending_nonce(from)?;
            let nonce = envelope.nonce();
            if nonce < next {
                return Err(RpcError::TxRejected(format!(
                    "nonce too low: next nonce {next}, tx nonce {nonce}"
                )));
            }
            let hash = *envelope.tx_hash();
            let mut chain = self.lock();
            chain.pool_nonces.insert(from, nonce + 1);
            chain.pool.push((from, envelope));
            drop(chain);
            self.hub.publish_pending(hash);
            Ok(hash)
        })();
        std::future::ready(result)
    }

    fn transaction_by_hash(&self, hash: B256) -> Result<Option<Transaction>, RpcError> {
        let chain = self.lock();
        Ok(chain
            .tx_index
            .get(&hash)
            .map(|&(n, i)| chain.blocks[n as usize].txs[i].clone()))
    }

    fn receipt(&self, hash: B256) -> Result<Option<TransactionReceipt>, RpcError> {
        let chain = self.lock();
        Ok(chain
            .tx_index
            .get(&hash)
            .map(|&(n, i)| chain.blocks[n as usize].receipts[i].clone()))
    }

    fn block_receipts(&self, number: u64) -> Result<Option<Vec<TransactionReceipt>>, RpcError> {
        Ok(self.stored(number, |b| b.receipts.clone()))
    }

    fn logs(
        &self,
        from: u64,
        to: u64,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Log>, RpcError> {
        let chain = self.lock();
        let mut out = Vec::new();
        for block in &chain.blocks[from as usize..=to as usize] {
            for receipt in &block.receipts {
                for log in receipt.inner.logs() {
                    if filter.matches(&log.inner) {
                        out.push(log.clone());
                        if out.len() > limit {
                            return Ok(out);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn subscriptions(&self) -> &SubscriptionHub {
        &self.hub
    }

    fn trace_block_prestate(&self, number: u64) -> Result<Vec<PrestateTrace>, RpcError> {
        let chain = self.lock();
        let block = chain
            .blocks
            .get(number as usize)
            .ok_or(RpcError::HeaderNotFound)?;
        let before = &chain.blocks[number as usize - 1];
        Ok(block
            .txs
            .iter()
            .map(|tx| {
                let from = tx.inner.signer();
                let mut result = BTreeMap::new();
                result.insert(
                    from,
                    PrestateAccount {
                        balance: before.balances.get(&from).copied().unwrap_or_default(),
                        nonce: before.nonces.get(&from).copied().unwrap_or_default(),
                        ..Default::default()
                    },
                );
                let mut storage = BTreeMap::new();
                storage.insert(B256::with_last_byte(1), B256::with_last_byte(0x99));
                result.insert(
                    CONTRACT,
                    PrestateAccount {
                        balance: U256::from(5),
                        nonce: 1,
                        code: Some(contract_code()),
                        storage,
                    },
                );
                PrestateTrace {
                    tx_hash: *tx.inner.tx_hash(),
                    result,
                }
            })
            .collect())
    }
}

/// One HTTP/1.1 POST of `body` over a fresh TCP connection; the status and the body.
pub fn http_post(addr: SocketAddr, body: &[u8]) -> (u16, String) {
    http_request(addr, "POST", "/", body)
}

/// One HTTP/1.1 request over a fresh TCP connection; the status and the body.
pub fn http_request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the server");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set a read timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The server may answer (413) and close before reading a large body; a failed write is
    // then expected, and the answer is still there to read.
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body));
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// POSTs a JSON value and parses the JSON answer.
pub fn rpc_json(addr: SocketAddr, request: &serde_json::Value) -> (u16, serde_json::Value) {
    let (status, body) = http_post(addr, request.to_string().as_bytes());
    let value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    (status, value)
}

/// `eth_blockNumber` over raw HTTP: the server still answers.
pub fn assert_serving(addr: SocketAddr) {
    let (status, value) = rpc_json(
        addr,
        &serde_json::json!({"jsonrpc":"2.0","id":99,"method":"eth_blockNumber","params":[]}),
    );
    assert_eq!(status, 200, "{value}");
    assert!(value["result"].is_string(), "{value}");
}
