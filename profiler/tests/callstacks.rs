//! Attribution by call stack: a transaction with a known call tree gives stacks of the right
//! shape, exact calls and gas, and time shares within the sampling error of the known work;
//! on the shipped mainnet blocks every sample lands in exactly one call path and the
//! per-contract times add up to the opcode table's total; the pprof profile decodes with an
//! independent protobuf reader (and `go tool pprof` where installed), and the flame graph
//! has a frame per contract.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use alloy_primitives::{Address, Bytes};
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_primitives::ChainSpec;
use gigas_profiler::calls::{CallOptions, CallReport};
use gigas_profiler::labels::Labels;
use gigas_profiler::replay::{LoadedBlock, Round, Workload};
use gigas_profiler::report::Report;
use gigas_profiler::stacks::{Filter, Label, StackProfile, Weight};

mod common;
use common::{configuration, copy_blocks};

const A: Address = gigas_evm::program::PROGRAM_ADDRESS;
const B: Address = Address::new([0xbb; 20]);
const C: Address = Address::new([0xcc; 20]);
const SEL_A: [u8; 4] = [0xaa; 4];
const SEL_B: [u8; 4] = [0xbb; 4];
const SEL_C: [u8; 4] = [0xcc; 4];

/// Iterations of every burn loop: each contract frame burns the same work.
const ITERATIONS: u32 = 60_000;
/// Gas of one burn: PUSH3, then JUMPDEST PUSH1 SWAP1 SUB DUP1 PUSH2 JUMPI per iteration, POP.
const BURN_GAS: u64 = 3 + 26 * ITERATIONS as u64 + 2;

/// A loop counting `n` down to zero, appended at the end of `code`.
fn burn(code: &mut Vec<u8>, n: u32) {
    let [_, b1, b2, b3] = n.to_be_bytes();
    code.extend_from_slice(&[0x62, b1, b2, b3]);
    let head = code.len() as u16;
    let [h1, h2] = head.to_be_bytes();
    // JUMPDEST; PUSH1 1; SWAP1; SUB; DUP1; PUSH2 head; JUMPI
    code.extend_from_slice(&[0x5b, 0x60, 0x01, 0x90, 0x03, 0x80, 0x61, h1, h2, 0x57]);
    // POP
    code.push(0x50);
}

/// CALL `to` with the 4-byte input `selector`, all gas, no value; the result is dropped.
fn call(code: &mut Vec<u8>, to: Address, selector: [u8; 4]) {
    // PUSH4 selector; PUSH1 224; SHL; PUSH1 0; MSTORE
    code.push(0x63);
    code.extend_from_slice(&selector);
    code.extend_from_slice(&[0x60, 0xe0, 0x1b, 0x60, 0x00, 0x52]);
    // retSize 0, retOffset 0, argsSize 4, argsOffset 0, value 0
    code.extend_from_slice(&[0x60, 0x00, 0x60, 0x00, 0x60, 0x04, 0x60, 0x00, 0x60, 0x00]);
    code.push(0x73);
    code.extend_from_slice(to.as_slice());
    // GAS; CALL; POP
    code.extend_from_slice(&[0x5a, 0xf1, 0x50]);
}

/// A calls B twice, B calls C; every frame burns [`ITERATIONS`].
fn synthetic_workload() -> Workload {
    let mut a = Vec::new();
    burn(&mut a, ITERATIONS);
    call(&mut a, B, SEL_B);
    call(&mut a, B, SEL_B);
    a.push(0x00);
    let mut b = Vec::new();
    burn(&mut b, ITERATIONS);
    call(&mut b, C, SEL_C);
    b.push(0x00);
    let mut c = Vec::new();
    burn(&mut c, ITERATIONS);
    c.push(0x00);
    let (block, mut db) =
        gigas_evm::program::call_block(Bytes::from(a), Bytes::copy_from_slice(&SEL_A), 100_000_000);
    for (address, code) in [(B, b), (C, c)] {
        let bytecode = Bytecode::new_raw(Bytes::from(code));
        db.insert_account_info(
            address,
            AccountInfo {
                code_hash: bytecode.hash_slow(),
                code: Some(bytecode),
                ..Default::default()
            },
        );
    }
    Workload {
        blocks: vec![LoadedBlock {
            dir: PathBuf::from("synthetic"),
            block,
            db,
        }],
    }
}

type CodeAndSelector = (Address, Option<[u8; 4]>);

fn frame_of(label: &Label) -> Option<CodeAndSelector> {
    match label {
        Label::Frame(f) => Some((f.code, f.selector)),
        _ => None,
    }
}

/// The tests of this file measure time, so they run one at a time, each with the replay and
/// the sampler on CPUs of their own as the profiler runs them: a replay thread that shares a
/// CPU with the spinning sampler is descheduled for milliseconds at a time, and the wall
/// time it waits is credited to whatever it was executing.
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = gigas_profiler::affinity::placement() {
        gigas_profiler::affinity::pin_current_thread(p.replay);
    }
    guard
}

fn merged(rounds: &[Round]) -> StackProfile {
    StackProfile::merged(rounds.iter().filter_map(|r| r.probed.stacks.as_ref()))
        .expect("call stacks were on")
}

/// Rounds of the synthetic workload until the sampler has seen enough of the work (a
/// loaded machine gives fewer samples per round), at most 40.
fn measure_enough(workload: &Workload) -> Vec<Round> {
    let mut rounds: Vec<Round> = Vec::new();
    while rounds.len() < 40 {
        rounds.extend(
            workload
                .measure(2, Duration::from_micros(2), |_, _| {})
                .expect("measures"),
        );
        let samples: u64 = merged(&rounds)
            .nodes()
            .iter()
            .flat_map(|n| n.activities.values())
            .map(|t| t.samples)
            .sum();
        if samples >= 5_000 {
            break;
        }
    }
    rounds
}

#[test]
fn a_known_call_tree_gives_its_stacks_calls_gas_and_shares() {
    let _one_at_a_time = exclusive();
    let workload = synthetic_workload();
    // A synthetic block has no header to check against: its check is its own replay.
    let gas = {
        let loaded = &workload.blocks[0];
        let mut evm = gigas_evm::PlainEvm::new(loaded.db.clone(), &loaded.block);
        let outcome = gigas_evm::execute_block(&mut evm, &loaded.block).expect("runs");
        assert!(
            outcome.receipts.iter().all(|r| r.success),
            "the calls succeed"
        );
        outcome.gas_used()
    };
    let checks = vec![gigas_evm::BlockCheck {
        number: 20_000_000,
        header_gas_used: gas,
        computed_gas_used: gas,
        computed_receipts_root: None,
        receipts_checked: false,
        mismatches: Vec::new(),
    }];
    let rounds = measure_enough(&workload);
    let profile = merged(&rounds);

    // The shape: block → tx 0 → A → B → C, B entered twice and C twice, nothing else.
    let frames: Vec<(Vec<CodeAndSelector>, u64, u64)> = profile
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.label, Label::Frame(_)))
        .map(|(i, n)| {
            let path = profile
                .path(i)
                .iter()
                .filter_map(|&p| frame_of(&profile.nodes()[p].label))
                .collect();
            (path, n.calls, n.gas)
        })
        .collect();
    let a = (A, Some(SEL_A));
    let b = (B, Some(SEL_B));
    let c = (C, Some(SEL_C));
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert_eq!(frames[0].0, vec![a]);
    assert_eq!(frames[1].0, vec![a, b]);
    assert_eq!(frames[2].0, vec![a, b, c]);
    assert_eq!(
        frames.iter().map(|f| f.1).collect::<Vec<_>>(),
        vec![1, 2, 2]
    );
    // C's two frames spent exactly its burn each; B's include C's, A's include B's.
    assert_eq!(frames[2].2, 2 * BURN_GAS);
    assert!(frames[1].2 > frames[2].2 + 2 * BURN_GAS);
    assert!(frames[0].2 > frames[1].2 + BURN_GAS);
    let tx_gas: u64 = profile
        .nodes()
        .iter()
        .filter(|n| matches!(n.label, Label::Tx { .. }))
        .map(|n| n.gas)
        .sum();
    assert_eq!(tx_gas, checks[0].computed_gas_used, "the receipt's gas");

    // Time: A burns once, B twice, C twice (the same loop): self shares 1/5, 2/5, 2/5 of
    // the samples in the three, within the sampling error (4 sigma) plus 3 points for the
    // calls' own cost and the sampler's jitter. Samples, not their weights: the whole work
    // is some 25 ms, and one interrupt of a millisecond or two (seen on this VM) weighs its
    // single sample with all of it, moving a share by 5 to 9 points; the sampler's weights
    // are checked against the opcode table on the mainnet blocks below.
    let identity = |_: u16, nanos: u64| nanos as f64;
    let costs = profile.code_costs(true, &Filter::default(), &identity);
    let in_frames: u64 = costs.iter().map(|c| c.self_samples).sum();
    assert!(
        in_frames >= 200,
        "the sampler saw {in_frames} samples in the frames over {} rounds",
        rounds.len()
    );
    let self_time: f64 = costs.iter().map(|c| c.self_time).sum();
    // The shares are the median of three independent measurements: a VM that stalls the
    // replay for milliseconds moves one measurement's shares by several points (seen once
    // on a loaded 2-vCPU VM: 0.29 for 0.2), and cannot move two of three the same way.
    let others: Vec<Vec<gigas_profiler::stacks::CodeCost>> = (0..2)
        .map(|_| merged(&measure_enough(&workload)).code_costs(true, &Filter::default(), &identity))
        .collect();
    for (code, selector, expected) in [(A, SEL_A, 0.2), (B, SEL_B, 0.4), (C, SEL_C, 0.4)] {
        let share_in = |costs: &[gigas_profiler::stacks::CodeCost]| {
            let all: u64 = costs.iter().map(|c| c.self_samples).sum();
            let cost = costs
                .iter()
                .find(|c| c.code == code && c.selector == Some(selector))
                .expect("a row per frame");
            (cost.self_samples as f64 / all as f64, all)
        };
        let mut shares: Vec<(f64, u64)> = std::iter::once(share_in(&costs))
            .chain(others.iter().map(|c| share_in(c)))
            .collect();
        shares.sort_by(|x, y| x.0.total_cmp(&y.0));
        let (share, samples) = shares[1];
        let sigma = (expected * (1.0 - expected) / samples as f64).sqrt();
        assert!(
            (share - expected).abs() <= 4.0 * sigma + 0.03,
            "{code}: median self share {share:.3} of {shares:?}, expected {expected} (σ {sigma:.4}, {samples} samples)"
        );
        let cost = costs
            .iter()
            .find(|c| c.code == code && c.selector == Some(selector))
            .expect("a row per frame");
        // Its top activities are the loop's opcodes.
        let top = gigas_profiler::calls::activity_name(cost.activities[0].0);
        assert!(
            ["JUMPDEST", "PUSH1", "SWAP1", "SUB", "DUP1", "PUSH2", "JUMPI"].contains(&top.as_str()),
            "{code}: top activity {top}"
        );
    }
    // Total time nests: A's total holds everything in the three, B's holds C's.
    let total = |code: Address| {
        costs
            .iter()
            .find(|c| c.code == code)
            .map(|c| c.total_time)
            .expect("row")
    };
    let self_of = |code: Address| {
        costs
            .iter()
            .find(|c| c.code == code)
            .map(|c| c.self_time)
            .expect("row")
    };
    assert!((total(A) - self_time).abs() < 1e-6 * self_time);
    assert!((total(B) - self_of(B) - self_of(C)).abs() < 1e-6 * self_time);

    // The files: a folded line per (frame, opcode), a pprof profile an independent reader
    // decodes into the same stacks, and a flame graph with a frame per contract.
    let report = Report::build(
        configuration(&workload, rounds.len()),
        &workload,
        &checks,
        &rounds,
        None,
    );
    let mut labels = Labels::shipped();
    labels
        .add_text(
            &format!("{A:#x} ContractA\n{B:#x} ContractB\n{C:#x} ContractC\n"),
            "test",
        )
        .expect("labels");
    let options = CallOptions {
        weight: Weight::Time,
        filter: Filter::default(),
        labels,
        top: 10,
        top_txs: 5,
        codes: workload.codes(),
        jit_budget_bytes: gigas_evm::jit::DEFAULT_BUDGET_BYTES,
    };
    let out = tempfile::tempdir().expect("tempdir");
    let calls = gigas_profiler::calls::write(&profile, &report, &options, out.path())
        .expect("writes the call report");
    assert_eq!(calls.contracts[0].name, "ContractA");
    assert_eq!(calls.contracts[0].calls, 1);
    assert!((calls.contracts[0].total_share - calls.in_frames_s / calls.kept_s).abs() < 1e-9);
    let folded = fs::read_to_string(out.path().join("stacks.folded")).expect("folded");
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("stack and count");
        assert!(count.parse::<u64>().expect("a count") > 0);
        // Outside the transaction only the block loop runs.
        assert!(
            stack.starts_with("block 20000000;tx 0 0x") || stack == "block 20000000;(block loop)",
            "{line}"
        );
    }
    assert!(
        folded.contains(";ContractA:0xaaaaaaaa;ContractB:0xbbbbbbbb;ContractC:0xcccccccc;JUMPI ")
    );
    let svg = fs::read_to_string(out.path().join("flame.svg")).expect("svg");
    for frame in [
        "ContractA:0xaaaaaaaa",
        "ContractB:0xbbbbbbbb",
        "ContractC:0xcccccccc",
    ] {
        assert!(svg.contains(frame), "{frame} missing from the flame graph");
    }
    // The JIT's view: the three contracts by the time compiled code runs in them (B and C
    // burn twice, A once), named by code hash in a hot list the JIT reads.
    let hot = gigas_evm::jit::HotList::read(&out.path().join("jit-hotlist.txt"))
        .expect("the hot list parses");
    let codes = workload.codes();
    let hash_of = |a: Address| codes[&a].hash;
    assert_eq!(hot.len(), 3);
    assert_eq!(hot.hashes()[2], hash_of(A));
    assert!(hot.contains(&hash_of(B)) && hot.contains(&hash_of(C)));
    assert!(calls.jit.iter().all(|r| r.ceiling > 1.0));
    // The list is sized to the code cache: nothing fits in none, all three in exactly theirs.
    use gigas_profiler::calls::{hot_list_text, MACHINE_BYTES_PER_EVM_BYTE};
    let parse = |text: String| gigas_evm::jit::HotList::parse(&text, "hot list").expect("parses");
    assert!(parse(hot_list_text(&calls, 0)).is_empty());
    let exact: u64 = [A, B, C]
        .iter()
        .map(|a| {
            assert_eq!(codes[a].specs.count_ones(), 1, "one block, one fork");
            codes[a].bytes as u64 * MACHINE_BYTES_PER_EVM_BYTE
        })
        .sum();
    assert_eq!(parse(hot_list_text(&calls, exact)).len(), 3);
    assert_eq!(parse(hot_list_text(&calls, exact - 1)).len(), 2);

    let decoded = decode_pprof(&out.path().join("profile.pb.gz"));
    let folded_lines = folded.lines().count();
    check_pprof(&decoded, folded_lines, "ContractC:0xcccccccc");
    go_pprof_top(&out.path().join("profile.pb.gz"), "ContractC:0xcccccccc");

    // --by gas: a stack per frame weighed by the gas of its own instructions.
    let by_gas = profile.weighted_stacks(
        Weight::Gas,
        &Filter::default(),
        &|l| options.labels.frame_name(l),
        &gigas_profiler::calls::activity_name,
        &identity,
    );
    let c_stack = by_gas
        .iter()
        .find(|s| s.frames.last().map(String::as_str) == Some("ContractC:0xcccccccc"))
        .expect("C's stack");
    assert_eq!(c_stack.value, (2 * BURN_GAS) as f64);

    // --contract keeps B and what it called.
    let only_b = Filter {
        contract: Some(B),
        tx: None,
    };
    let kept = profile.code_costs(false, &only_b, &identity);
    assert!(kept.iter().all(|c| c.code != A || c.self_samples == 0));
    assert!(kept.iter().any(|c| c.code == C && c.self_samples > 0));
}

#[test]
fn mainnet_samples_land_in_one_path_each_and_add_up_to_the_opcode_table() {
    let _one_at_a_time = exclusive();
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_blocks(tmp.path(), &["4370000", "19426587"]);
    let workload = Workload::load(tmp.path(), &ChainSpec::mainnet(), |_, _| {}).expect("loads");
    let checks = workload.check(|_, _| {}).expect("match their headers");
    let rounds = workload
        .measure(2, Duration::from_micros(2), |_, _| {})
        .expect("measures");
    let profile = merged(&rounds);
    assert_eq!(profile.rounds, 2);
    assert_eq!(profile.dropped_frames, 0);

    // Every transaction is a node under its block, with its receipt's gas: the blocks'
    // gas, exactly.
    for (loaded, check) in workload.blocks.iter().zip(&checks) {
        let block = profile
            .nodes()
            .iter()
            .position(|n| n.label == Label::Block(loaded.block.number))
            .expect("a node per block");
        let txs: Vec<_> = profile
            .nodes()
            .iter()
            .filter(|n| n.parent == block && matches!(n.label, Label::Tx { .. }))
            .collect();
        assert_eq!(txs.len(), loaded.block.txs.len());
        assert_eq!(
            txs.iter().map(|n| n.gas).sum::<u64>(),
            check.computed_gas_used
        );
        for (tx, prepared) in txs.iter().zip(&loaded.block.txs) {
            assert!(matches!(tx.label, Label::Tx { hash, .. } if hash == prepared.hash));
        }
    }
    // Every frame was entered, and contract frames run under transactions.
    for (i, node) in profile.nodes().iter().enumerate() {
        if let Label::Frame(_) = node.label {
            assert!(node.calls > 0);
            assert!(profile
                .path(i)
                .iter()
                .any(|&p| matches!(profile.nodes()[p].label, Label::Tx { .. })));
        }
    }

    // Every sample the rounds took in the blocks is in exactly one call path.
    let idle = gigas_evm::probe::Phase::Idle as usize;
    let taken: u64 = rounds
        .iter()
        .flat_map(|r| r.probed.histogram.samples.iter().enumerate())
        .filter(|(activity, _)| *activity != idle)
        .map(|(_, samples)| samples)
        .sum();
    let in_paths: u64 = profile
        .nodes()
        .iter()
        .flat_map(|n| n.activities.values())
        .map(|t| t.samples)
        .sum();
    assert_eq!(in_paths, taken);

    // The per-contract times and the time outside frames add up to the opcode table's
    // total (the same samples, corrected the same way).
    let report = Report::build(
        configuration(&workload, 2),
        &workload,
        &checks,
        &rounds,
        None,
    );
    let options = CallOptions {
        weight: Weight::Time,
        filter: Filter::default(),
        labels: Labels::shipped(),
        top: usize::MAX,
        top_txs: 5,
        codes: workload.codes(),
        jit_budget_bytes: gigas_evm::jit::DEFAULT_BUDGET_BYTES,
    };
    let calls = CallReport::build(&profile, &report, &options);
    let tolerance = 1e-9 * report.attributed_seconds_per_pass.max(1e-9);
    assert!(
        (calls.kept_s - report.attributed_seconds_per_pass).abs() <= tolerance,
        "kept {} s, opcode table {} s",
        calls.kept_s,
        report.attributed_seconds_per_pass
    );
    let contracts_self: f64 = calls.contracts.iter().map(|c| c.self_s).sum();
    assert!((contracts_self + calls.outside_frames_s - calls.kept_s).abs() <= tolerance);
    assert!(calls
        .contracts
        .windows(2)
        .all(|w| w[0].total_s >= w[1].total_s));
    // The busy Cancun block calls USDT (named by the shipped label file).
    assert!(
        calls
            .contracts
            .iter()
            .any(|c| c.name == "USDT" && c.calls > 0),
        "{:?}",
        calls.contracts.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
    // Each block lists its costliest transactions, ranked.
    for loaded in &workload.blocks {
        let ranked: Vec<_> = calls
            .transactions
            .iter()
            .filter(|t| t.block == loaded.block.number && t.rank_by_time.is_some())
            .collect();
        assert_eq!(ranked.len(), loaded.block.txs.len().min(5));
        assert!(ranked.windows(2).all(|w| w[0].time_ms >= w[1].time_ms));
    }
    // --tx keeps one transaction's samples alone.
    let first = workload.blocks[1].block.txs[0].hash;
    let only = Filter {
        contract: None,
        tx: Some(first),
    };
    let identity = |_: u16, nanos: u64| nanos as f64;
    let stacks = profile.weighted_stacks(
        Weight::Time,
        &only,
        &|l| options.labels.frame_name(l),
        &gigas_profiler::calls::activity_name,
        &identity,
    );
    let prefix = format!("tx 0 {}", &format!("{first:#x}")[..12]);
    assert!(!stacks.is_empty());
    assert!(stacks.iter().all(|s| s.frames[1] == prefix), "{prefix}");
}

/// pprof's message, as much of it as the test reads (field numbers of pprof's
/// `profile.proto`), decoded by prost: a reader that shares no code with the writer.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub(crate) sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub(crate) sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub(crate) location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub(crate) function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub(crate) string_table: Vec<String>,
        #[prost(int64, tag = "10")]
        pub(crate) duration_nanos: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ValueType {
        #[prost(int64, tag = "1")]
        pub(crate) r#type: i64,
        #[prost(int64, tag = "2")]
        pub(crate) unit: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub(crate) location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub(crate) value: Vec<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Location {
        #[prost(uint64, tag = "1")]
        pub(crate) id: u64,
        #[prost(message, repeated, tag = "4")]
        pub(crate) line: Vec<Line>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Line {
        #[prost(uint64, tag = "1")]
        pub(crate) function_id: u64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Function {
        #[prost(uint64, tag = "1")]
        pub(crate) id: u64,
        #[prost(int64, tag = "2")]
        pub(crate) name: i64,
    }
}

fn decode_pprof(path: &Path) -> proto::Profile {
    use prost::Message;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(path).expect("profile.pb.gz"))
        .read_to_end(&mut bytes)
        .expect("gzip");
    proto::Profile::decode(bytes.as_slice()).expect("a pprof profile")
}

fn check_pprof(profile: &proto::Profile, folded_lines: usize, leaf_frame: &str) {
    let strings = &profile.string_table;
    assert_eq!(strings[0], "", "pprof's string 0 is empty");
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| {
            (
                strings[t.r#type as usize].as_str(),
                strings[t.unit as usize].as_str(),
            )
        })
        .collect();
    assert_eq!(types, [("samples", "count"), ("time", "nanoseconds")]);
    // The folded file leaves out stacks that round to zero; pprof keeps them all.
    assert!(profile.sample.len() >= folded_lines && folded_lines > 0);
    let function_name = |id: u64| -> &str {
        let function = profile
            .function
            .iter()
            .find(|f| f.id == id)
            .expect("a function per id");
        &strings[function.name as usize]
    };
    let location_name = |id: u64| -> &str {
        let location = profile
            .location
            .iter()
            .find(|l| l.id == id)
            .expect("a location per id");
        function_name(location.line[0].function_id)
    };
    let mut found = false;
    for sample in &profile.sample {
        assert_eq!(sample.value.len(), 2);
        assert!(sample.value[1] >= 0);
        // Leaf first: the root-most frame is the block.
        let names: Vec<&str> = sample
            .location_id
            .iter()
            .map(|&id| location_name(id))
            .collect();
        assert!(
            names.last().expect("frames").starts_with("block "),
            "{names:?}"
        );
        found |= names.contains(&leaf_frame);
    }
    assert!(found, "{leaf_frame} in no sample");
    assert!(profile.duration_nanos > 0);
}

/// `go tool pprof -top` reads the profile, where Go is installed.
fn go_pprof_top(path: &Path, frame: &str) {
    let Ok(output) = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=time"])
        .arg(path)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
    else {
        eprintln!("go is not installed: pprof checked with prost alone");
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(frame), "{frame} missing from:\n{stdout}");
}
