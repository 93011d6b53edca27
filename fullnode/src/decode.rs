//! The decode stage: verifies and decodes diffs on a thread of its own, ahead of the apply
//! thread, against [`AheadState`] (the last commit with the blocks it decoded above it), so
//! that the apply thread only writes, roots and commits. Shared by the node's follower and
//! `gigas-bench fullnode --decode-ahead`.
//!
//! **Owns:** the order and the classification of what it decodes (a diff rejected, the
//! local state failing). **Must not:** write anything, or decode a block it has not seen the
//! predecessor of: its state is only right while the writer applies exactly the blocks it
//! decoded, in order. After anything else (a refused block, a discarded group, a restart),
//! the caller opens a new [`AheadDecoder`] once the writer's open group is committed.
//!
//! The writer still checks each block's number and parent, and trusts the decoded values
//! only as far as the chained checksum the signed header carries proves them.

use std::time::Instant;

use alloy_primitives::Address;
use gigas_statedb::{AheadState, AheadStats, StateDb, StateDbError};
use gigas_statediff::{verify_and_decode_timed, VerifiedDiff, VerifyTimings};

use crate::apply::{classify, ApplyError};

/// Diffs handed to the decode thread and not yet taken back, at most. A group's commit holds
/// the apply thread for a second or more (the sorted B-tree writes, MDBX's commit): the
/// decode thread goes on meanwhile, up to this many blocks (about two seconds of blocks at
/// 17 blocks/s), so that the next blocks' decoding overlaps it. Their changes are held twice
/// (decoded, and in the state ahead) until the writer takes them: a few MiB per block of
/// 5,000 changes. In the node the fetch queue's byte bound holds for them too.
pub const DECODED_AHEAD: usize = 32;

/// One diff through the stage.
#[derive(Debug)]
pub struct Decoded {
    /// The verified diff, or why not.
    pub result: Result<VerifiedDiff, ApplyError>,
    /// Where its verification spent the time.
    pub timings: VerifyTimings,
}

/// Verifies and decodes diffs in order against the state it keeps ahead of the writer.
#[derive(Debug)]
pub struct AheadDecoder<'db> {
    state: AheadState<'db>,
    sequencer: Address,
    /// A local failure (not the diff's fault) makes the state unknown: everything after it
    /// is refused until the caller opens a new decoder.
    failed: bool,
}

impl<'db> AheadDecoder<'db> {
    /// At `db`'s last commit, which must be the writer's tip (its open group empty, no
    /// commit in flight); `commitment`: check the signed state commitment (as
    /// [`crate::apply::Applier::keep_commitment`]).
    pub fn open(
        db: &'db StateDb,
        sequencer: Address,
        commitment: bool,
    ) -> Result<Self, StateDbError> {
        Ok(Self {
            state: AheadState::open(db, commitment)?,
            sequencer,
            failed: false,
        })
    }

    /// The last block decoded.
    pub fn tip(&self) -> gigas_statediff::ChainTip {
        self.state.tip()
    }

    /// What the state ahead holds.
    pub fn stats(&self) -> AheadStats {
        self.state.stats()
    }

    /// Verifies `bytes` as the successor of the last block decoded, as
    /// [`crate::apply::Applier::verify`] does against the writer, and records it. A rejected
    /// diff changes nothing (the next one must be its replacement).
    pub fn decode(&mut self, bytes: &[u8]) -> Decoded {
        let mut timings = VerifyTimings::default();
        let result = self.decode_timed(bytes, &mut timings);
        Decoded { result, timings }
    }

    fn decode_timed(
        &mut self,
        bytes: &[u8],
        timings: &mut VerifyTimings,
    ) -> Result<VerifiedDiff, ApplyError> {
        if self.failed {
            return Err(ApplyError::Store(StateDbError::Invariant {
                what: "the decode stage failed reading its state earlier; reopen it".into(),
            }));
        }
        // Renewing the snapshot is reading: its time is the decode step's.
        let start = Instant::now();
        let renewed = self.state.renew();
        timings.decode += start.elapsed().as_secs_f64();
        if let Err(e) = renewed {
            self.failed = true;
            return Err(e.into());
        }
        let verified = verify_and_decode_timed(
            &self.state.tip(),
            self.state.lattice(),
            self.sequencer,
            bytes,
            &self.state,
            &self.state,
            timings,
        )
        .map_err(classify);
        let verified = match verified {
            Ok(v) => v,
            Err(e) => {
                self.failed = !matches!(e, ApplyError::Rejected(_));
                return Err(e);
            }
        };
        let start = Instant::now();
        let recorded = self.state.record(&verified);
        timings.decode += start.elapsed().as_secs_f64();
        if let Err(e) = recorded {
            self.failed = true;
            return Err(e.into());
        }
        Ok(verified)
    }
}

/// Runs the stage: decodes what `next` gives until it gives `None`, handing each result to
/// `send`, until `send` returns `false` (the apply thread is gone). Opens the decoder first
/// (at `expected`, the writer's tip, when given); if that fails, sends that error once and
/// returns.
pub fn run<B: AsRef<[u8]>>(
    db: &StateDb,
    sequencer: Address,
    commitment: bool,
    expected: Option<gigas_statediff::ChainTip>,
    mut next: impl FnMut() -> Option<B>,
    mut send: impl FnMut(B, Decoded) -> bool,
) {
    let opened = AheadDecoder::open(db, sequencer, commitment).and_then(|d| match expected {
        Some(tip) if tip != d.tip() => Err(StateDbError::Invariant {
            what: format!(
                "the decode stage opened at block {} but the writer is at {}",
                d.tip().number,
                tip.number
            ),
        }),
        _ => Ok(d),
    });
    let mut decoder = match opened {
        Ok(d) => d,
        Err(e) => {
            if let Some(bytes) = next() {
                send(
                    bytes,
                    Decoded {
                        result: Err(e.into()),
                        timings: VerifyTimings::default(),
                    },
                );
            }
            return;
        }
    };
    while let Some(bytes) = next() {
        let decoded = decoder.decode(bytes.as_ref());
        if !send(bytes, decoded) {
            return;
        }
    }
}

/// The decode thread as the apply thread drives it: items go in in order and come back
/// decoded in the same order, at most [`DECODED_AHEAD`] at a time. Dropping it stops the
/// thread (what it held is dropped undecoded).
#[derive(Debug)]
pub struct DecodeStage<T> {
    input: Option<std::sync::mpsc::SyncSender<T>>,
    output: Option<std::sync::mpsc::Receiver<(T, Decoded)>>,
    in_flight: usize,
    /// The number the next item must have.
    next: u64,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl<T: AsRef<[u8]> + Send + 'static> DecodeStage<T> {
    /// Starts the thread at the database's last commit, which must be `writer_tip` (the
    /// writer's open group empty and no commit in flight).
    pub fn spawn(
        db: std::sync::Arc<StateDb>,
        sequencer: Address,
        commitment: bool,
        writer_tip: gigas_statediff::ChainTip,
    ) -> std::io::Result<Self> {
        let (input, items) = std::sync::mpsc::sync_channel::<T>(DECODED_AHEAD);
        let (decoded, output) = std::sync::mpsc::sync_channel::<(T, Decoded)>(DECODED_AHEAD);
        let handle = std::thread::Builder::new()
            .name("decode".into())
            .spawn(move || {
                run(
                    &db,
                    sequencer,
                    commitment,
                    Some(writer_tip),
                    || items.recv().ok(),
                    |item, d| decoded.send((item, d)).is_ok(),
                )
            })?;
        Ok(Self {
            input: Some(input),
            output: Some(output),
            in_flight: 0,
            next: writer_tip.number.wrapping_add(1),
            handle: Some(handle),
        })
    }

    /// Items handed in and not yet taken back.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether another item may be handed in.
    pub fn has_room(&self) -> bool {
        self.in_flight < DECODED_AHEAD
    }

    /// The block number the next item must be.
    pub fn next_number(&self) -> u64 {
        self.next
    }

    /// Hands in the next block's item (the caller checked its number against
    /// [`DecodeStage::next_number`] and [`DecodeStage::has_room`]). Gives it back when the
    /// thread is gone.
    pub fn submit(&mut self, item: T) -> Result<(), T> {
        let Some(input) = self.input.as_ref() else {
            return Err(item);
        };
        match input.try_send(item) {
            Ok(()) => {
                self.in_flight += 1;
                self.next = self.next.wrapping_add(1);
                Ok(())
            }
            Err(std::sync::mpsc::TrySendError::Full(item))
            | Err(std::sync::mpsc::TrySendError::Disconnected(item)) => Err(item),
        }
    }

    /// The oldest item handed in, decoded, when it is: waits for it. `None` when nothing is
    /// in flight or the thread is gone.
    pub fn take(&mut self) -> Option<(T, Decoded)> {
        if self.in_flight == 0 {
            return None;
        }
        let taken = self.output.as_ref()?.recv().ok()?;
        self.in_flight -= 1;
        Some(taken)
    }
}

impl<T> Drop for DecodeStage<T> {
    fn drop(&mut self) {
        // Both channels closed: the thread ends at its next receive or send.
        self.input.take();
        self.output.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
