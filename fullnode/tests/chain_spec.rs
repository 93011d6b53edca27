//! A full node never holds the sequencer's signing key: it refuses a chain spec that carries
//! one, naming the command that writes the public spec, and `gigas-sequencer export-chain`
//! writes a spec with the sequencer's address in place of the key.

use std::process::Command;

use gigas_chain::ChainConfig;

#[test]
fn a_spec_with_the_signing_key_is_refused_and_the_exported_one_has_none() {
    let dir = tempfile::tempdir().unwrap();
    // The sequencer's own spec: the dev chain with its key.
    let chain = ChainConfig::dev(250).unwrap();
    assert!(chain.has_signing_key());
    let with_key = dir.path().join("chain.json");
    std::fs::write(&with_key, serde_json::to_string_pretty(&chain).unwrap()).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_gigas-fullnode"))
        .arg("--chain")
        .arg(&with_key)
        .arg("--datadir")
        .arg(dir.path().join("fullnode"))
        .args(["--http.port", "0", "--sequencer", "http://127.0.0.1:9"])
        .output()
        .expect("run gigas-fullnode");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the full node took a spec with the key"
    );
    assert!(
        stderr.contains("carries the sequencer's signing key")
            && stderr.contains("gigas-sequencer export-chain"),
        "{stderr}"
    );

    let public = dir.path().join("public-chain.json");
    let out = Command::new(gigas_test_support::workspace_binary("gigas-sequencer"))
        .arg("export-chain")
        .arg("--chain")
        .arg(&with_key)
        .arg("--out")
        .arg(&public)
        .output()
        .expect("run gigas-sequencer export-chain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&public).unwrap();
    assert!(!text.contains("sequencer_key"), "{text}");
    let exported = ChainConfig::load(&public).unwrap();
    assert!(!exported.has_signing_key());
    assert_eq!(
        exported.sequencer_address,
        Some(chain.signer().unwrap().address())
    );
    // Everything else is the sequencer's chain: the same genesis.
    assert_eq!(
        exported.genesis_fingerprint().unwrap(),
        chain.genesis_fingerprint().unwrap()
    );
}
