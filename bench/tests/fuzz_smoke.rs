//! A short run of `gigas-bench fuzz` (issue 29, finding 9): every decoder a peer or a client
//! reaches gets 20,000 mutated inputs; none may panic or break a round trip, and the mutations
//! must reach past the checksums (refusals of several kinds, some accepted inputs).

use gigas_bench::fuzz::{fuzz_quietly, Seeds, Target};

#[test]
fn every_decoder_survives_mutated_input() {
    let seeds = Seeds::build(29).expect("valid seeds");
    for target in Target::ALL {
        let report = fuzz_quietly(&seeds, target, 20_000, 36);
        println!(
            "{target:?}: {} accepted, {} refused ({:?}), {} failed, {:.0} cases/s",
            report.accepted,
            report.refused,
            report.refusals,
            report.failures,
            report.cases_per_second
        );
        assert_eq!(
            report.failures, 0,
            "{target:?} failed on mutated input: {:?}",
            report.first_failure
        );
        assert!(
            report.accepted >= 100,
            "{target:?}: the seeds are not accepted"
        );
        assert!(
            report.refusals.len() >= 3,
            "{target:?}: mutations are refused in too few ways: {:?}",
            report.refusals
        );
    }
}
