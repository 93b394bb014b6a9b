//! Frame, request header and every request decoder, from arbitrary socket bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tributary_protocol::fuzzing::request(data));
