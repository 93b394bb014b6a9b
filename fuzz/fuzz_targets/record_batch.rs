//! RecordBatch v2 header parsing and CRC validation, from arbitrary record bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tributary_protocol::fuzzing::record_batches(data));
