//! A call-stack profile as a pprof profile (`profile.pb.gz`): the gzipped protocol-buffer
//! format of `go tool pprof`, which Pyroscope, Grafana, speedscope and most profile viewers
//! read.
//!
//! The message is small enough to write by hand (see pprof's `proto/profile.proto`): a
//! string table, one function and one location per distinct frame name, and one sample per
//! folded stack with its values. Owns: the encoding. Must not: decide what the stacks are
//! (`stacks` does).

use std::collections::HashMap;
use std::io::Write;

/// One sample type (`type` and `unit`, e.g. `time`/`nanoseconds`).
#[derive(Debug, Clone, Copy)]
pub struct SampleType<'a> {
    /// What is measured.
    pub kind: &'a str,
    /// Its unit.
    pub unit: &'a str,
}

/// A profile being assembled.
#[derive(Debug, Default)]
pub struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: HashMap<String, u64>,
    sample_types: Vec<(i64, i64)>,
    samples: Vec<(Vec<u64>, Vec<i64>)>,
    duration_nanos: i64,
}

impl Builder {
    /// A profile whose samples carry one value per `types` entry.
    pub fn new(types: &[SampleType<'_>]) -> Self {
        let mut builder = Self::default();
        // pprof requires string 0 to be the empty string.
        builder.string("");
        for t in types {
            let pair = (builder.string(t.kind), builder.string(t.unit));
            builder.sample_types.push(pair);
        }
        builder
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn function(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.functions.get(name) {
            return id;
        }
        // Ids start at 1: 0 means "none" in pprof. A location per function, same id.
        let id = self.functions.len() as u64 + 1;
        self.string(name);
        self.functions.insert(name.to_string(), id);
        id
    }

    /// Adds a sample: `stack` from the root to the leaf, `values` one per sample type.
    pub fn add(&mut self, stack: &[&str], values: &[i64]) {
        // pprof lists a sample's locations leaf first.
        let locations = stack.iter().rev().map(|f| self.function(f)).collect();
        self.samples.push((locations, values.to_vec()));
    }

    /// The wall time the profile covers.
    pub fn duration_nanos(&mut self, nanos: i64) {
        self.duration_nanos = nanos;
    }

    /// The profile message, not compressed.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for &(kind, unit) in &self.sample_types {
            let mut m = Vec::new();
            int_field(&mut m, 1, kind);
            int_field(&mut m, 2, unit);
            bytes_field(&mut out, 1, &m);
        }
        for (locations, values) in &self.samples {
            let mut m = Vec::new();
            packed_field(&mut m, 1, locations.iter().copied());
            packed_field(&mut m, 2, values.iter().map(|&v| v as u64));
            bytes_field(&mut out, 2, &m);
        }
        let mut functions: Vec<(&String, &u64)> = self.functions.iter().collect();
        functions.sort_by_key(|(_, &id)| id);
        for &(_, &id) in &functions {
            let mut line = Vec::new();
            int_field(&mut line, 1, id as i64);
            let mut m = Vec::new();
            int_field(&mut m, 1, id as i64);
            bytes_field(&mut m, 4, &line);
            bytes_field(&mut out, 4, &m);
        }
        for (name, &id) in &functions {
            let name_id = self.string_ids.get(*name).copied().unwrap_or(0);
            let mut m = Vec::new();
            int_field(&mut m, 1, id as i64);
            int_field(&mut m, 2, name_id);
            int_field(&mut m, 3, name_id);
            bytes_field(&mut out, 5, &m);
        }
        for s in &self.strings {
            bytes_field(&mut out, 6, s.as_bytes());
        }
        int_field(&mut out, 10, self.duration_nanos);
        if let Some(&(kind, unit)) = self.sample_types.last() {
            let mut m = Vec::new();
            int_field(&mut m, 1, kind);
            int_field(&mut m, 2, unit);
            bytes_field(&mut out, 11, &m);
        }
        out
    }

    /// The profile, gzipped as `profile.pb.gz` is.
    pub fn encode_gzip(&self) -> std::io::Result<Vec<u8>> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&self.encode())?;
        gz.finish()
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint field; zero is the default and is left out, as protobuf encoders do.
fn int_field(out: &mut Vec<u8>, field: u32, v: i64) {
    if v != 0 {
        varint(out, u64::from(field) << 3);
        varint(out, v as u64);
    }
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    varint(out, (u64::from(field) << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn packed_field(out: &mut Vec<u8>, field: u32, values: impl Iterator<Item = u64>) {
    let mut body = Vec::new();
    for v in values {
        varint(&mut body, v);
    }
    if !body.is_empty() {
        bytes_field(out, field, &body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
    }
}
