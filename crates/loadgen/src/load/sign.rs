//! The workloads and their signing: draws with a fixed seed, nonces tracked per sender, and
//! every transaction of a step signed ahead of time on every core.

use std::collections::HashMap;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{hex, Address, Bytes, TxKind, B256, U256};
use eyre::{eyre, Result};
use gigas_chain::bench_key;
use rayon::prelude::*;

use super::{Distribution, Workload};
use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};

/// Gas limit of an ERC-20 transfer: WETH9's `transfer` uses about 30,000 to 52,000.
pub(crate) const ERC20_GAS: u64 = 100_000;
/// Gas of a plain transfer.
pub(crate) const TRANSFER_GAS: u64 = 21_000;
/// Fee cap: far above any base fee these runs reach, and small enough that a sender's full
/// pool window (256 ERC-20 transactions) needs only 25.6 ETH of its 1,000.
pub(crate) const MAX_FEE_PER_GAS: u128 = 1_000_000_000_000;
/// Tip: 1 gwei, as wallets default to; every transaction pays the same, so none outbids another.
pub(crate) const PRIORITY_FEE: u128 = 1_000_000_000;

/// One transaction to be signed: who sends what to whom.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draft {
    /// Sender: the benchmark account index.
    pub(crate) from: u32,
    /// Receiver: the benchmark account index.
    pub(crate) to: u32,
    /// An ERC-20 transfer (else ether).
    pub(crate) erc20: bool,
    /// Wei (or token units).
    pub(crate) value: u64,
    /// Filled in by [`Generator::assign_nonces`].
    pub(crate) nonce: u64,
}

/// A signed transaction ready to send.
#[derive(Debug, Clone)]
pub(crate) struct SignedTx {
    /// Its hash.
    pub(crate) hash: B256,
    /// Its EIP-2718 bytes as `0x`-prefixed hex, as `eth_sendRawTransaction` takes them.
    pub(crate) hex: String,
    /// An ERC-20 transfer.
    pub(crate) erc20: bool,
}

/// Draws and signs the transactions of a workload.
#[derive(Debug)]
pub(crate) struct Generator {
    workload: Workload,
    distribution: Distribution,
    erc20_share: f64,
    token: Option<Address>,
    seed: u64,
    chain_id: u64,
    addresses: Vec<Address>,
    dist: ZipfMandelbrot,
    rng: SplitMix64,
    /// The next nonce of every sender seen so far.
    nonces: HashMap<u32, u64>,
    /// Private keys of the senders seen so far (deriving one costs a curve multiplication in
    /// `bench_key`'s check, so each is derived once).
    keys: HashMap<u32, B256>,
}

impl Generator {
    /// A generator over `addresses` (the benchmark accounts of `seed`), its draws seeded by
    /// `workload_seed`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        workload: Workload,
        distribution: Distribution,
        erc20_share: f64,
        token: Option<Address>,
        seed: u64,
        workload_seed: u64,
        chain_id: u64,
        addresses: Vec<Address>,
    ) -> Result<Self> {
        if addresses.is_empty() || addresses.len() > u32::MAX as usize {
            return Err(eyre!(
                "{} benchmark accounts: need 1 to 2^32",
                addresses.len()
            ));
        }
        if workload != Workload::Transfers && token.is_none() {
            return Err(eyre!(
                "the {workload:?} workload needs a genesis with WETH9"
            ));
        }
        let dist = ZipfMandelbrot::new(addresses.len(), DEVNET_S, DEVNET_V);
        Ok(Self {
            workload,
            distribution,
            erc20_share,
            token,
            seed,
            chain_id,
            addresses,
            dist,
            rng: SplitMix64(workload_seed),
            nonces: HashMap::new(),
            keys: HashMap::new(),
        })
    }

    /// The chain id it signs for.
    pub(crate) fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The address of account `index`.
    pub(crate) fn address(&self, index: u32) -> Address {
        self.addresses[index as usize]
    }

    /// Draws `n` transactions (nonces not yet assigned): senders and receivers
    /// Zipf-Mandelbrot over the accounts, the kind by the workload.
    pub(crate) fn draw(&mut self, n: usize) -> Vec<Draft> {
        (0..n)
            .map(|_| {
                let from = self.draw_account();
                let to = self.draw_account();
                let erc20 = match self.workload {
                    Workload::Transfers => false,
                    Workload::Erc20 => true,
                    Workload::Mix => self.rng.next_f64() < self.erc20_share,
                };
                // Below 2^40 wei (about 0.000001 ETH): no sender runs dry in any run.
                let value = 1 + (self.rng.next_u64() >> 24);
                Draft {
                    from,
                    to,
                    erc20,
                    value,
                    nonce: 0,
                }
            })
            .collect()
    }

    /// One account index by the distribution.
    fn draw_account(&mut self) -> u32 {
        let u = self.rng.next_f64();
        match self.distribution {
            Distribution::Zipf => self.dist.rank(u) as u32,
            // `u` < 1, so the product is below the count, which fits in u32 (checked in new).
            Distribution::Uniform => (u * self.addresses.len() as f64) as u32,
        }
    }

    /// Senders in `drafts` whose nonce is not known yet, each once.
    pub(crate) fn new_senders(&self, drafts: &[Draft]) -> Vec<u32> {
        let mut seen = std::collections::HashSet::new();
        drafts
            .iter()
            .map(|d| d.from)
            .filter(|from| !self.nonces.contains_key(from) && seen.insert(*from))
            .collect()
    }

    /// Records the next nonce of senders not seen before.
    pub(crate) fn set_nonces(&mut self, nonces: impl IntoIterator<Item = (u32, u64)>) {
        for (from, nonce) in nonces {
            self.nonces.entry(from).or_insert(nonce);
        }
    }

    /// Gives each draft its sender's next nonce, in order.
    pub(crate) fn assign_nonces(&mut self, drafts: &mut [Draft]) {
        for d in drafts {
            let next = self.nonces.entry(d.from).or_insert(0);
            d.nonce = *next;
            *next += 1;
        }
    }

    /// Signs `drafts` on every core (the senders' keys derived first, once each).
    pub(crate) fn sign(&mut self, drafts: &[Draft]) -> Result<Vec<SignedTx>> {
        let missing: Vec<u32> = {
            let mut seen = std::collections::HashSet::new();
            drafts
                .iter()
                .map(|d| d.from)
                .filter(|f| !self.keys.contains_key(f) && seen.insert(*f))
                .collect()
        };
        let seed = self.seed;
        let derived: Vec<(u32, B256)> = missing
            .into_par_iter()
            .map(|i| (i, bench_key(seed, u64::from(i))))
            .collect();
        self.keys.extend(derived);
        let this = &*self;
        drafts
            .par_iter()
            .map(|d| this.sign_one(d))
            .collect::<Result<Vec<_>>>()
    }

    fn sign_one(&self, d: &Draft) -> Result<SignedTx> {
        let to = self.address(d.to);
        let (kind, value, input, gas_limit) = match (d.erc20, self.token) {
            (true, Some(token)) => {
                // transfer(address to, uint256 amount)
                let mut data = Vec::with_capacity(68);
                data.extend_from_slice(&[0xa9, 0x05, 0x9c, 0xbb]);
                data.extend_from_slice(&[0u8; 12]);
                data.extend_from_slice(to.as_slice());
                data.extend_from_slice(&U256::from(d.value).to_be_bytes::<32>());
                (
                    TxKind::Call(token),
                    U256::ZERO,
                    Bytes::from(data),
                    ERC20_GAS,
                )
            }
            _ => (
                TxKind::Call(to),
                U256::from(d.value),
                Bytes::new(),
                TRANSFER_GAS,
            ),
        };
        let tx = TxEip1559 {
            chain_id: self.chain_id,
            nonce: d.nonce,
            gas_limit,
            max_fee_per_gas: MAX_FEE_PER_GAS,
            max_priority_fee_per_gas: PRIORITY_FEE,
            to: kind,
            value,
            access_list: Default::default(),
            input,
        };
        let key = self
            .keys
            .get(&d.from)
            .ok_or_else(|| eyre!("no key derived for account {}", d.from))?;
        // libsecp256k1 (alloy's `secp256k1` feature): several times faster than k256.
        let signature = alloy_consensus::crypto::secp256k1::sign_message(*key, tx.signature_hash())
            .map_err(|e| eyre!("signing for account {}: {e}", d.from))?;
        let signed = tx.into_signed(signature);
        let hash = *signed.hash();
        let raw = TxEnvelope::from(signed).encoded_2718();
        Ok(SignedTx {
            hash,
            hex: hex::encode_prefixed(raw),
            erc20: d.erc20,
        })
    }
}
