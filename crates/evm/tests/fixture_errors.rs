//! A malformed or missing fixture file is an error naming the file and the field.

use std::fs;
use std::path::Path;

use gigas_evm::fixture::{BLOCK_FILE, PRESTATE_FILE};
use gigas_evm::{load_fixture, load_fixtures_dir, FixtureError};

use gigas_test_support as common;

fn write_zstd(path: &Path, json: &str) {
    let compressed = zstd::encode_all(json.as_bytes(), 3).expect("compress");
    fs::write(path, compressed).expect("write");
}

fn copy_fixture(number: &str, to: &Path) {
    let from = common::mainnet_dir().join(number);
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read fixture dir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[test]
fn missing_prestate_names_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("46147");
    copy_fixture("46147", &dir);
    fs::remove_file(dir.join(PRESTATE_FILE)).expect("remove");
    let err = load_fixture(&dir).expect_err("must fail");
    assert!(matches!(err, FixtureError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains(PRESTATE_FILE), "{err}");
}

#[test]
fn corrupt_zstd_names_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("46147");
    copy_fixture("46147", &dir);
    let mut bytes = fs::read(dir.join(BLOCK_FILE)).expect("read");
    let len = bytes.len();
    bytes.truncate(len / 2);
    fs::write(dir.join(BLOCK_FILE), bytes).expect("write");
    let err = load_fixture(&dir).expect_err("must fail");
    assert!(matches!(err, FixtureError::Zstd { .. }), "{err:?}");
    assert!(err.to_string().contains(BLOCK_FILE), "{err}");
}

#[test]
fn missing_field_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("46147");
    copy_fixture("46147", &dir);
    let json =
        zstd::decode_all(fs::read(dir.join(BLOCK_FILE)).expect("read").as_slice()).expect("decode");
    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("json");
    value.as_object_mut().expect("object").remove("gasUsed");
    write_zstd(&dir.join(BLOCK_FILE), &value.to_string());
    let err = load_fixture(&dir).expect_err("must fail");
    let msg = err.to_string();
    assert!(msg.contains(BLOCK_FILE) && msg.contains("gasUsed"), "{msg}");
}

#[test]
fn bad_prestate_value_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("46147");
    copy_fixture("46147", &dir);
    write_zstd(
        &dir.join(PRESTATE_FILE),
        r#"{"0xa1e4380a3b1f749673e270229993ee55f35663b4":{"balance":"not a number","nonce":0}}"#,
    );
    let err = load_fixture(&dir).expect_err("must fail");
    let msg = err.to_string();
    assert!(msg.contains(PRESTATE_FILE), "{msg}");
    assert!(matches!(err, FixtureError::Json { .. }), "{err:?}");
}

#[test]
fn block_in_the_wrong_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("46148");
    copy_fixture("46147", &dir);
    let err = load_fixture(&dir).expect_err("must fail");
    assert!(err.to_string().contains("number"), "{err}");
}

#[test]
fn empty_directory_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = load_fixtures_dir(tmp.path()).expect_err("must fail");
    assert!(matches!(err, FixtureError::Directory { .. }), "{err:?}");
}
