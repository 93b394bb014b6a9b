//! Entry points shared by the fuzz targets (`fuzz/`) and the stable random-input smoke test:
//! each takes arbitrary bytes and must return without panicking, whatever they hold.

use bytes::Bytes;

use crate::frame::request_frame_length;
use crate::header::{decode_request_header, peek_fixed};
use crate::registry::{api_key, lookup};
use crate::requests::*;
use crate::Reader;

/// A whole request as it arrives on a socket: length prefix, header, body of any API/version.
pub fn request(data: &[u8]) {
    let Some(prefix) = data.get(..4) else { return };
    let prefix: [u8; 4] = [prefix[0], prefix[1], prefix[2], prefix[3]];
    let Ok(len) = request_frame_length(prefix, 1 << 20) else {
        return;
    };
    let body = Bytes::copy_from_slice(&data[4..data.len().min(4 + len)]);
    let mut r = Reader::new(body);
    let Ok((key, version, _)) = peek_fixed(&r) else {
        return;
    };
    let Some(spec) = lookup(key) else { return };
    if decode_request_header(&mut r, spec.request_header_flexible(version)).is_err() {
        return;
    }
    // Decode at every version the API serves, not only the one claimed, to cover more shapes.
    for v in spec.min_version..=spec.max_version {
        let mut r = r.clone();
        match key {
            api_key::PRODUCE => {
                if let Ok(req) = produce::decode(&mut r, v) {
                    for t in &req.topics {
                        for p in &t.partitions {
                            if let Some(records) = &p.records {
                                let _ = crate::record_batch::validate_all(records);
                            }
                        }
                    }
                }
            }
            api_key::FETCH => drop(fetch::decode(&mut r, v)),
            api_key::LIST_OFFSETS => drop(list_offsets::decode(&mut r, v)),
            api_key::METADATA => drop(metadata::decode(&mut r, v)),
            api_key::API_VERSIONS => drop(api_versions::decode(&mut r, v)),
            api_key::CREATE_TOPICS => drop(create_topics::decode(&mut r, v)),
            api_key::DELETE_TOPICS => drop(delete_topics::decode(&mut r, v)),
            api_key::DELETE_RECORDS => drop(delete_records::decode(&mut r, v)),
            api_key::INIT_PRODUCER_ID => drop(init_producer_id::decode(&mut r, v)),
            api_key::DESCRIBE_CONFIGS => drop(describe_configs::decode(&mut r, v)),
            api_key::DESCRIBE_CLUSTER => drop(describe_cluster::decode(&mut r, v)),
            api_key::FIND_COORDINATOR => drop(groups::decode_find_coordinator(&mut r, v)),
            api_key::JOIN_GROUP => drop(groups::decode_join_group(&mut r, v)),
            api_key::SYNC_GROUP => drop(groups::decode_sync_group(&mut r, v)),
            api_key::HEARTBEAT => drop(groups::decode_heartbeat(&mut r, v)),
            api_key::LEAVE_GROUP => drop(groups::decode_leave_group(&mut r, v)),
            api_key::OFFSET_COMMIT => drop(groups::decode_offset_commit(&mut r, v)),
            api_key::OFFSET_FETCH => drop(groups::decode_offset_fetch(&mut r, v)),
            api_key::LIST_GROUPS => drop(groups::decode_list_groups(&mut r, v)),
            api_key::DESCRIBE_GROUPS | api_key::DELETE_GROUPS => {
                drop(groups::decode_group_ids(&mut r, key, v))
            }
            api_key::OFFSET_DELETE => drop(groups::decode_offset_delete(&mut r, v)),
            api_key::CONSUMER_GROUP_HEARTBEAT => drop(consumer_group::decode_heartbeat(&mut r, v)),
            api_key::CONSUMER_GROUP_DESCRIBE => drop(consumer_group::decode_describe(&mut r, v)),
            api_key::ALTER_CONFIGS | api_key::INCREMENTAL_ALTER_CONFIGS => {
                drop(alter_configs::decode(&mut r, key, v))
            }
            api_key::CREATE_PARTITIONS => drop(create_partitions::decode(&mut r, v)),
            api_key::DESCRIBE_LOG_DIRS => drop(describe_log_dirs::decode(&mut r, v)),
            api_key::OFFSET_FOR_LEADER_EPOCH => drop(offset_for_leader_epoch::decode(&mut r, v)),
            api_key::ELECT_LEADERS => drop(elect_leaders::decode(&mut r, v)),
            api_key::DESCRIBE_QUORUM => drop(describe_quorum::decode(&mut r, v)),
            api_key::ALTER_PARTITION_REASSIGNMENTS => {
                drop(partition_reassignments::decode_alter(&mut r, v))
            }
            api_key::LIST_PARTITION_REASSIGNMENTS => {
                drop(partition_reassignments::decode_list(&mut r, v))
            }
            api_key::ADD_PARTITIONS_TO_TXN if v >= 4 => {
                drop(txn::decode_add_partitions_batch(&mut r, v))
            }
            api_key::ADD_PARTITIONS_TO_TXN => drop(txn::decode_add_partitions(&mut r, v)),
            api_key::ADD_OFFSETS_TO_TXN => drop(txn::decode_add_offsets(&mut r, v)),
            api_key::END_TXN => drop(txn::decode_end_txn(&mut r, v)),
            api_key::TXN_OFFSET_COMMIT => drop(txn::decode_txn_offset_commit(&mut r, v)),
            api_key::WRITE_TXN_MARKERS => drop(txn::decode_write_markers(&mut r, v)),
            api_key::DESCRIBE_TRANSACTIONS => drop(txn::decode_describe_transactions(&mut r, v)),
            api_key::LIST_TRANSACTIONS => drop(txn::decode_list_transactions(&mut r, v)),
            api_key::DESCRIBE_PRODUCERS => drop(txn::decode_describe_producers(&mut r, v)),
            _ => {}
        }
    }
}

/// Record bytes as a produce request or a segment file holds them.
pub fn record_batches(data: &[u8]) {
    let _ = crate::record_batch::validate_all(data);
    let _ = crate::record_batch::records(data);
    // The produce path's record walk, over the bytes as a records section and, when they start
    // with a batch header, over that batch's records as its header counts them.
    let _ = crate::records::records(data, 16).count();
    if let Ok(h) = crate::record_batch::parse_header(data, 0) {
        let end = h.size().min(data.len());
        let section = data.get(crate::record_batch::RECORD_BATCH_HEADER_BYTES..end);
        let _ = crate::records::records(section.unwrap_or_default(), h.records_count).count();
    }
    let bytes = Bytes::copy_from_slice(data);
    let _ = crate::group_records::GroupKey::decode(bytes.clone());
    let _ = crate::group_records::GroupValue::decode(bytes.clone());
    let _ = crate::group_records::OffsetValue::decode(bytes.clone());
    let _ = crate::txn_records::TxnKey::decode(bytes.clone());
    let _ = crate::txn_records::TxnValue::decode(bytes);
    let _ = crate::group_records::subscription_topics(data);
    let mut position = 0;
    while position < data.len() {
        match crate::record_batch::parse_header(&data[position..], position) {
            Ok(h) if h.size() <= data.len() - position => position += h.size(),
            _ => break,
        }
    }
}

/// A small deterministic generator (xorshift64*) for randomized tests across the workspace. The
/// seed comes from `SEED` when set, else from the clock; [`SeededRng::from_env`] prints it so a
/// failing run can be replayed.
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        // xorshift never leaves zero.
        Self(seed | 1)
    }

    /// Seeds from `SEED`, or from the clock, and prints `<label> SEED=<seed>`.
    pub fn from_env(label: &str) -> Self {
        let seed = std::env::var("SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{label} SEED={seed}");
        Self::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` for tests; `n` must be positive.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0) has no values");
        (self.next_u64() % n as u64) as usize
    }
}
