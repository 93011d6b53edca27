//! Every shipped mainnet block replays exactly: gasUsed always, receipts root and logs bloom
//! from Byzantium on, on the plain EVM and on the probed one.

use gigas_test_support as common;

use gigas_evm::probe::{Probe, ProbedEvm};
use gigas_evm::{execute_block, load_fixtures_dir, PlainEvm, PreparedBlock};
use gigas_primitives::ChainSpec;

#[test]
fn every_shipped_block_matches_its_header() {
    let fixtures = load_fixtures_dir(common::mainnet_dir()).expect("fixtures load");
    assert_eq!(fixtures.len(), 50, "the shipped set has 50 blocks");
    let chain = ChainSpec::mainnet();
    let mut checked_receipts = 0;
    let mut total_txs = 0;
    for fixture in &fixtures {
        let block = PreparedBlock::from_fixture(fixture, &chain).expect("block prepares");
        total_txs += block.txs.len();

        let mut plain = PlainEvm::new(fixture.database(), &block);
        let outcome = execute_block(&mut plain, &block)
            .unwrap_or_else(|e| panic!("block {} fails: {e}", block.number));
        let check = outcome.check(&block).expect("fixtures have headers");
        assert!(
            check.is_match(),
            "block {}: {:?}",
            block.number,
            check.mismatches
        );
        assert_eq!(Some(check.computed_gas_used), block.header_gas_used());
        if check.receipts_checked {
            checked_receipts += 1;
        }

        // The probe must not change anything the block produces.
        let mut probed = ProbedEvm::new(fixture.database(), &block, Probe::default());
        let probed_outcome = execute_block(&mut probed, &block).expect("probed block executes");
        assert_eq!(
            probed_outcome, outcome,
            "block {}: probe changed the outcome",
            block.number
        );
        let counted: u64 = probed.probe().counts.iter().sum();
        if block
            .txs
            .iter()
            .any(|tx| tx.env.kind.is_call() && !tx.env.data.is_empty())
        {
            assert!(
                counted > 0,
                "block {} ran contract code but counted no opcode",
                block.number
            );
        }
    }
    assert_eq!(total_txs, 9229, "the shipped set has 9,229 transactions");
    // Byzantium starts at 4,370,000; the set holds 36 blocks from there on.
    assert!(
        checked_receipts >= 30,
        "only {checked_receipts} blocks had receipts checked"
    );
}
