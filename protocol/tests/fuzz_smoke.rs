//! A stable-toolchain stand-in for the libFuzzer targets: random and mutated inputs through the
//! same entry points. Prints its seed; replay with `SEED=<n>`.

use tributary_protocol::fuzzing::{self, SeededRng};
use tributary_protocol::record_batch::build_batch;

fn seeds() -> Vec<Vec<u8>> {
    let batch = build_batch(&[(Some(b"k"), Some(b"value"))], 1, Some((1, 0, 0))).to_vec();
    let mut produce = vec![
        0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 1, 0, 1, b'c', 0xff, 0xff, 0xff, 0xff, 0, 0, 0x75, 0x30,
    ];
    produce.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 0]);
    produce.extend_from_slice(&(batch.len() as i32).to_be_bytes());
    produce.extend_from_slice(&batch);
    let len = (produce.len() - 4) as i32;
    produce[..4].copy_from_slice(&len.to_be_bytes());
    let metadata = vec![
        0, 0, 0, 16, 0, 3, 0, 12, 0, 0, 0, 1, 0, 1, b'c', 0, 2, 0, 0, 0,
    ];
    vec![batch, produce, metadata]
}

#[test]
fn random_and_mutated_inputs_never_panic() {
    let iterations: usize = std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let mut rng = SeededRng::from_env("fuzz smoke");
    let corpus = seeds();
    for _ in 0..iterations {
        let mut input = corpus[rng.below(corpus.len())].clone();
        for _ in 0..=rng.below(8) {
            match rng.below(4) {
                0 if !input.is_empty() => {
                    let i = rng.below(input.len());
                    input[i] = rng.next_u64() as u8;
                }
                1 if !input.is_empty() => input.truncate(rng.below(input.len())),
                2 => input.insert(rng.below(input.len() + 1), rng.next_u64() as u8),
                _ => {
                    let i = rng.below(input.len() + 1);
                    let n = rng.below(4);
                    for _ in 0..n {
                        input.insert(i, 0xff);
                    }
                }
            }
        }
        fuzzing::request(&input);
        fuzzing::record_batches(&input);
    }
}
