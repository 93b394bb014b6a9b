//! Kafka error codes, by the names Kafka gives them (see `org.apache.kafka.common.protocol.Errors`).

/// A Kafka error code as sent on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    pub const NONE: Self = Self(0);
    pub const OFFSET_OUT_OF_RANGE: Self = Self(1);
    pub const CORRUPT_MESSAGE: Self = Self(2);
    pub const UNKNOWN_TOPIC_OR_PARTITION: Self = Self(3);
    pub const INVALID_FETCH_SIZE: Self = Self(4);
    pub const LEADER_NOT_AVAILABLE: Self = Self(5);
    pub const NOT_LEADER_OR_FOLLOWER: Self = Self(6);
    pub const REQUEST_TIMED_OUT: Self = Self(7);
    pub const MESSAGE_TOO_LARGE: Self = Self(10);
    pub const OFFSET_METADATA_TOO_LARGE: Self = Self(12);
    pub const COORDINATOR_NOT_AVAILABLE: Self = Self(15);
    pub const NOT_COORDINATOR: Self = Self(16);
    pub const INVALID_TOPIC_EXCEPTION: Self = Self(17);
    pub const RECORD_LIST_TOO_LARGE: Self = Self(18);
    pub const INVALID_REQUIRED_ACKS: Self = Self(21);
    pub const ILLEGAL_GENERATION: Self = Self(22);
    pub const INCONSISTENT_GROUP_PROTOCOL: Self = Self(23);
    pub const INVALID_GROUP_ID: Self = Self(24);
    pub const UNKNOWN_MEMBER_ID: Self = Self(25);
    pub const INVALID_SESSION_TIMEOUT: Self = Self(26);
    pub const REBALANCE_IN_PROGRESS: Self = Self(27);
    pub const TOPIC_AUTHORIZATION_FAILED: Self = Self(29);
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: Self = Self(43);
    pub const INVALID_TIMESTAMP: Self = Self(32);
    pub const UNSUPPORTED_VERSION: Self = Self(35);
    pub const TOPIC_ALREADY_EXISTS: Self = Self(36);
    pub const INVALID_PARTITIONS: Self = Self(37);
    pub const INVALID_REPLICATION_FACTOR: Self = Self(38);
    pub const INVALID_REPLICA_ASSIGNMENT: Self = Self(39);
    pub const INVALID_CONFIG: Self = Self(40);
    pub const NOT_CONTROLLER: Self = Self(41);
    pub const INVALID_REQUEST: Self = Self(42);
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: Self = Self(45);
    pub const DUPLICATE_SEQUENCE_NUMBER: Self = Self(46);
    pub const INVALID_PRODUCER_EPOCH: Self = Self(47);
    pub const NOT_ENOUGH_REPLICAS: Self = Self(19);
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: Self = Self(20);
    pub const FENCED_LEADER_EPOCH: Self = Self(74);
    pub const INVALID_UPDATE_VERSION: Self = Self(95);
    pub const PREFERRED_LEADER_NOT_AVAILABLE: Self = Self(80);
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: Self = Self(83);
    pub const ELECTION_NOT_NEEDED: Self = Self(84);
    pub const NO_REASSIGNMENT_IN_PROGRESS: Self = Self(85);
    pub const UNKNOWN_LEADER_EPOCH: Self = Self(75);
    pub const UNKNOWN_TOPIC_ID: Self = Self(100);
    pub const KAFKA_STORAGE_ERROR: Self = Self(56);
    pub const UNKNOWN_PRODUCER_ID: Self = Self(59);
    pub const NON_EMPTY_GROUP: Self = Self(68);
    pub const GROUP_ID_NOT_FOUND: Self = Self(69);
    pub const MEMBER_ID_REQUIRED: Self = Self(79);
    pub const GROUP_MAX_SIZE_REACHED: Self = Self(81);
    pub const FENCED_INSTANCE_ID: Self = Self(82);
    pub const GROUP_SUBSCRIBED_TO_TOPIC: Self = Self(86);
    pub const FETCH_SESSION_ID_NOT_FOUND: Self = Self(70);
    pub const INVALID_FETCH_SESSION_EPOCH: Self = Self(71);
    pub const FETCH_SESSION_TOPIC_ID_ERROR: Self = Self(106);
    /// An ISR change would add a replica that is fenced, shutting down or unknown (KIP-841).
    pub const INELIGIBLE_REPLICA: Self = Self(107);
    /// A request names a broker epoch the broker has since replaced (it registered again).
    pub const STALE_BROKER_EPOCH: Self = Self(77);
    pub const POLICY_VIOLATION: Self = Self(44);
    pub const INVALID_RECORD: Self = Self(87);
    pub const INVALID_TXN_STATE: Self = Self(48);
    pub const INVALID_PRODUCER_ID_MAPPING: Self = Self(49);
    pub const INVALID_TRANSACTION_TIMEOUT: Self = Self(50);
    pub const CONCURRENT_TRANSACTIONS: Self = Self(51);
    pub const TRANSACTION_COORDINATOR_FENCED: Self = Self(52);
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Self = Self(53);
    pub const OPERATION_NOT_ATTEMPTED: Self = Self(55);
    pub const PRODUCER_FENCED: Self = Self(90);
    pub const UNSUPPORTED_SASL_MECHANISM: Self = Self(33);
    pub const ILLEGAL_SASL_STATE: Self = Self(34);
    pub const SASL_AUTHENTICATION_FAILED: Self = Self(58);
    pub const CLUSTER_AUTHORIZATION_FAILED: Self = Self(31);
    pub const GROUP_AUTHORIZATION_FAILED: Self = Self(30);
    pub const SECURITY_DISABLED: Self = Self(54);
    pub const RESOURCE_NOT_FOUND: Self = Self(91);
    pub const DUPLICATE_RESOURCE: Self = Self(92);
    pub const UNACCEPTABLE_CREDENTIAL: Self = Self(93);
    pub const BROKER_NOT_AVAILABLE: Self = Self(8);
    pub const UNSTABLE_OFFSET_COMMIT: Self = Self(88);
    pub const TRANSACTIONAL_ID_NOT_FOUND: Self = Self(105);
    /// KIP-919: a DescribeCluster for controller endpoints sent to a broker.
    pub const MISMATCHED_ENDPOINT_TYPE: Self = Self(114);
    /// KIP-848's consumer groups: a member epoch the coordinator no longer accepts (the member
    /// must give up its partitions and rejoin), an instance still held by a live member, an
    /// assignor the coordinator does not have, an epoch behind the member's current one (an
    /// offset commit that must wait for the next heartbeat), an unparsable subscription regex.
    pub const FENCED_MEMBER_EPOCH: Self = Self(110);
    pub const UNRELEASED_INSTANCE_ID: Self = Self(111);
    pub const UNSUPPORTED_ASSIGNOR: Self = Self(112);
    pub const STALE_MEMBER_EPOCH: Self = Self(113);
    pub const INVALID_REGULAR_EXPRESSION: Self = Self(128);
    pub const UNKNOWN_SERVER_ERROR: Self = Self(-1);

    pub fn code(self) -> i16 {
        self.0
    }

    pub fn is_error(self) -> bool {
        self.0 != 0
    }
}
