//! A sequencer and a full node on loopback under a load of signed transactions stay
//! identical: every account and slot the load touched, the block hashes (which commit to the
//! state root), and the full node's MPT root recomputed from scratch from its plain state
//! equals the root it kept incrementally and the header's `stateRoot` the sequencer signed,
//! as does the sequencer's state hashed from scratch from its own store
//! (`gigas-sequencer state-root`). A second node re-executes
//! every block (`--verify-execution`) and agrees with every diff.

mod common;

use std::time::Duration;

use alloy_primitives::B256;
use common::{head, rpc, Load, Process};
use gigas_statedb::{StateDb, StateDbOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_under_load_matches_the_sequencer() {
    let dir = tempfile::tempdir().unwrap();
    let mut seq = Process::sequencer(&dir.path().join("seq"));
    // Small groups and a root every block, as a dev node; the catch-up uses ranges and the
    // push (the node starts before the load). Its account trie is loaded at start.
    let mut node = Process::fullnode(
        &dir.path().join("fn"),
        &seq.url,
        &[
            "--root-every",
            "1",
            "--prefetch",
            "true",
            "--trie.sparse-size",
            "64MiB",
            "--trie.preload",
            "true",
        ],
    );
    // A second node re-executes every block and compares it with the diff (the stateless
    // challenger's check); it halts on any difference.
    let checker = Process::fullnode(
        &dir.path().join("fn-check"),
        &seq.url,
        &[
            "--verify-execution",
            "--root-every",
            "0",
            "--decode-ahead",
            "false",
        ],
    );

    let load = Load::start(&seq.url, 4, 17).await;
    // Blocks in the middle of the load, whose states differ from the head's: read again at
    // the end from the full node's window of recent states (issue 29, finding 15).
    let mut past = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        past.push(head(&seq.url).await);
    }
    let touched = load.stop(&seq.url).await;
    let accepted_slots = touched.slots.len();
    assert!(
        touched.accounts.len() > 20 && accepted_slots > 4,
        "the load touched too little: {touched:?}"
    );

    // Both quiet (only empty blocks from here on): wait for the full node to reach the head.
    let target = head(&seq.url).await;
    common::wait_for_block(&node.url, target, Duration::from_secs(60)).await;
    common::assert_same_state(&node.url, &seq.url, &touched).await;
    for number in &past {
        let tag = serde_json::json!(format!("{number:#x}"));
        common::assert_same_state_at(&node.url, &seq.url, &touched, tag.clone()).await;
        common::assert_proofs_at(&node.url, &seq.url, &touched, tag).await;
    }
    let tag = serde_json::json!(format!("{target:#x}"));
    common::assert_proofs_at(&node.url, &seq.url, &touched, tag).await;
    common::wait_for_block(&checker.url, target, Duration::from_secs(60)).await;
    common::assert_same_state(&checker.url, &seq.url, &touched).await;
    // The prefetch stage read every touched key's pages ahead of the apply thread (keys
    // indexed in a group not yet committed excepted: at most the load's first writes).
    // The node decoded on its decode thread (on by default with room for it); the checker,
    // told not to, decoded every block on its apply thread.
    node.assert_metric_at_least(
        "gigas_fullnode_decoded_ahead_blocks_total",
        target as f64 / 2.0,
        "most blocks decoded on the decode thread",
    );
    assert_eq!(
        checker.metric("gigas_fullnode_decoded_ahead_blocks_total"),
        Some(0.0),
        "the checker decodes on its apply thread"
    );
    node.assert_metric_at_least(
        "gigas_fullnode_prefetched_keys_total",
        (touched.accounts.len() + accepted_slots) as f64,
        "every key the load touched, read ahead",
    );
    assert_eq!(
        checker.metric("gigas_fullnode_prefetched_keys_total"),
        Some(0.0),
        "prefetch off by default"
    );
    checker.assert_metric_at_least(
        "gigas_fullnode_reexecuted_blocks_total",
        target as f64,
        "every block re-executed",
    );

    // Same blocks: a block hash covers its header's stateRoot, which the full node checked
    // against its own root after applying the block. The full node serves the header as signed (its
    // blocks' transactions it does not keep), so every field is the sequencer's.
    let n = head(&node.url).await;
    for number in [1, n / 2, n] {
        let tag = format!("{number:#x}");
        let ours = rpc(&node.url, "eth_getHeaderByNumber", serde_json::json!([tag])).await;
        let theirs = rpc(&seq.url, "eth_getHeaderByNumber", serde_json::json!([tag])).await;
        assert_eq!(
            ours["result"]["hash"], theirs["result"]["hash"],
            "block {number}"
        );
        for field in [
            "parentHash",
            "stateRoot",
            "transactionsRoot",
            "receiptsRoot",
            "gasUsed",
        ] {
            assert_eq!(
                ours["result"][field], theirs["result"][field],
                "block {number}'s {field}"
            );
        }
    }
    let theirs = rpc(
        &seq.url,
        "eth_getBlockByNumber",
        serde_json::json!([format!("{n:#x}"), false]),
    )
    .await;
    let signed: B256 = theirs["result"]["stateRoot"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ours = rpc(
        &node.url,
        "eth_getBlockByNumber",
        serde_json::json!([format!("{n:#x}"), false]),
    )
    .await;
    assert_eq!(
        ours["result"]["stateRoot"], theirs["result"]["stateRoot"],
        "both nodes serve block {n}'s header as signed"
    );

    // The sequencer's own state, read from its store once it stopped and hashed from scratch
    // (`gigas-sequencer state-root`), has the root the full node kept for the same state
    // (the blocks after the load are empty: they change nothing).
    let roots = rpc(
        &node.url,
        "gigas_getStateRoot",
        serde_json::json!([format!("{n:#x}")]),
    )
    .await;
    let kept: B256 = roots["result"]["stateRoot"]
        .as_str()
        .unwrap_or_else(|| panic!("no root at block {n}: {roots}"))
        .parse()
        .unwrap();
    seq.interrupt();
    let out = std::process::Command::new(common::sequencer_bin())
        .args(["state-root", "--datadir"])
        .arg(dir.path().join("seq"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "state-root failed: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "block N: state root 0x… (A accounts, S slots, T s)"
    let (block, root) = printed
        .trim()
        .strip_prefix("block ")
        .and_then(|rest| rest.split_once(": state root "))
        .unwrap_or_else(|| panic!("unexpected state-root output: {printed}"));
    let block: u64 = block.parse().unwrap();
    let root: B256 = root.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        block >= target,
        "the sequencer's store is at {block}, below {target}"
    );
    assert_eq!(
        root, kept,
        "the sequencer's state at block {block} from scratch against the full node's root at {n}"
    );
    assert_eq!(
        kept, signed,
        "gigas_getStateRoot is the header's stateRoot, the sequencer's trie's root"
    );

    // The root kept incrementally equals one recomputed from scratch from the plain state.
    node.interrupt();
    let db = StateDb::open(&dir.path().join("fn/state"), StateDbOptions::default()).unwrap();
    let view = db.view().unwrap();
    let tip = view.tip().unwrap().unwrap();
    assert!(
        tip.number >= n,
        "the durable head {} is below the served {n}",
        tip.number
    );
    if tip.number == n {
        assert_eq!(tip.state_root, signed, "the head's stateRoot at block {n}");
    }
    let (root_block, root) = view.last_root().unwrap().expect("a root was kept");
    assert_eq!(
        root_block, tip.number,
        "--root-every 1 keeps the head's root"
    );
    assert_eq!(view.state_root_from_scratch().unwrap(), root);
    for address in &touched.accounts {
        assert!(
            view.account(address).unwrap().is_some(),
            "{address} is in the state"
        );
    }
}
