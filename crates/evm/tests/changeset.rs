//! A block's ChangeSet, as `gigas_evm::BlockChanges` folds it from revm's per-transaction
//! reports, is the one revm's own `State` database derives from its bundle, on every shipped
//! mainnet block; and it survives its encoding.

use gigas_primitives::ChangeSet;
use gigas_test_support::{assert_same_changes, execute_with_reference, mainnet_blocks};

#[test]
fn the_folded_changeset_is_revms_bundle_on_every_shipped_block() {
    let blocks = mainnet_blocks();
    assert_eq!(blocks.len(), 50);
    let (mut accounts, mut destroyed, mut wiped, mut slots, mut deleted, mut codes) =
        (0, 0, 0, 0, 0, 0);
    for (fixture, block) in &blocks {
        let (outcome, reference) = execute_with_reference(fixture, block);
        let check = outcome.check(block).expect("fixtures have headers");
        assert!(check.is_match(), "block {}: {:?}", block.number, check);
        let changes = &outcome.changes;
        assert_same_changes(&format!("block {}", block.number), changes, &reference);
        let bytes = changes.encode();
        assert_eq!(ChangeSet::decode(&bytes).as_ref(), Ok(changes));
        if !block.txs.is_empty() {
            assert!(
                !changes.is_empty(),
                "block {} changed nothing",
                block.number
            );
        }
        accounts += changes.accounts().len();
        destroyed += changes
            .accounts()
            .iter()
            .filter(|(_, c)| c.state.is_none())
            .count();
        wiped += changes
            .accounts()
            .iter()
            .filter(|(_, c)| c.storage_wiped && c.state.is_some())
            .count();
        slots += changes.storage().len();
        deleted += changes
            .storage()
            .iter()
            .filter(|(_, _, v)| v.is_zero())
            .count();
        codes += changes.bytecodes().len();
    }
    println!(
        "50 blocks: {accounts} accounts changed ({destroyed} destroyed, {wiped} re-created over \
         old storage), {slots} slots ({deleted} deleted), {codes} new bytecodes"
    );
    // The shipped blocks exercise every kind of change the encoding has.
    assert!(accounts > 10_000 && slots > 10_000, "{accounts} {slots}");
    assert!(destroyed > 0, "no block destroyed an account");
    assert!(deleted > 0 && codes > 0, "{deleted} {codes}");
}
