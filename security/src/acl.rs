//! Kafka's ACL model and the decisions of its `StandardAuthorizer` (KIP-11, KIP-290 prefixed
//! ACLs): the enums with their wire codes (used by CreateAcls, DescribeAcls and DeleteAcls), an
//! [`AclBinding`] and the [`AclBindingFilter`] that selects bindings, the validation a binding
//! passes before it is created, the [`Authorizer`] that answers "may this principal do this
//! operation on this resource", and a versioned binary encoding of one binding for the metadata
//! log.
//!
//! Pure logic: this module never does I/O, never touches the runtime and never panics on any
//! input from a client or from disk. Every [`AclError`] maps to Kafka's `INVALID_REQUEST` and its
//! `Display` text is the message Kafka sends with it.
//!
//! The decision rules, as Kafka applies them:
//! - a super user (`super.users`) is allowed everything;
//! - an ACL applies to a resource when it is LITERAL with the resource's name, LITERAL with the
//!   name `*`, or PREFIXED with a prefix of the name;
//! - among the applicable ACLs, one matches the request when its principal is the request's or
//!   `User:*`, its host is the request's or `*`, and its operation is the requested one or `ALL`;
//!   an ALLOW of READ, WRITE, DELETE or ALTER also grants DESCRIBE, and an ALLOW of ALTER_CONFIGS
//!   grants DESCRIBE_CONFIGS. A DENY only denies its own operation (or everything, for `ALL`):
//!   a DENY of READ leaves DESCRIBE alone, and a DENY of DESCRIBE leaves READ alone;
//! - any matching DENY wins over every ALLOW; else any matching ALLOW allows; else, when some
//!   ACL (for any principal or operation) applies to the resource, the answer is Denied; when
//!   none does, it is `allow.everyone.if.no.acl.found`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::ops::Bound;

/// The resource name and host that match every resource name and every host.
pub const WILDCARD: &str = "*";

/// The principal that ACLs use to match every principal. Only the `User` type has a wildcard:
/// an ACL for `Group:*` matches the principal `Group:*` and nothing else, as in Kafka.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The only name a CLUSTER resource has.
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";

/// Longest resource name, principal or host a binding may carry, in bytes. Kafka's wire strings
/// carry an `int16` length, so no client can send a longer one; the encoding relies on it.
pub const ACL_STRING_BYTES_MAX: usize = i16::MAX as usize;

/// The version [`AclBinding::encode`] writes; [`AclBinding::decode`] reads only this one.
pub const ACL_ENCODING_VERSION: u8 = 1;

/// The value of an `authorized_operations` field a client did not ask for (Kafka's
/// `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Declares one of Kafka's ACL enums: variants with their wire codes and their Kafka names, the
/// `UNKNOWN` fallback for a code or name Kafka does not define, and `Display` as the name.
macro_rules! kafka_enum {
    (
        $(#[$doc:meta])*
        $name:ident {
            $($(#[$vdoc:meta])* $variant:ident = $code:literal => $text:literal,)+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &'static [$name] = &[$($name::$variant,)+];

            /// The code Kafka's requests and responses carry.
            pub const fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            /// The value for a wire code; a code Kafka does not define is `Unknown`.
            pub const fn from_code(code: i8) -> Self {
                match code {
                    $($code => $name::$variant,)+
                    _ => $name::Unknown,
                }
            }

            /// Kafka's name for the value (`TOPIC`, `PREFIXED`, `CLUSTER_ACTION`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value for a name, ignoring ASCII case as Kafka's `fromString` does; a name
            /// Kafka does not define is `Unknown`.
            pub fn from_name(text: &str) -> Self {
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|value| value.name().eq_ignore_ascii_case(text))
                    .unwrap_or($name::Unknown)
            }

            /// True for `Unknown`, the value of a code or name Kafka does not define.
            pub const fn is_unknown(self) -> bool {
                matches!(self, $name::Unknown)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum! {
    /// The type of a resource an ACL protects (Kafka's `ResourceType`).
    ResourceType {
        /// A code this broker does not know.
        Unknown = 0 => "UNKNOWN",
        /// In a filter: every type.
        Any = 1 => "ANY",
        /// A topic.
        Topic = 2 => "TOPIC",
        /// A consumer group.
        Group = 3 => "GROUP",
        /// The cluster, always named `kafka-cluster`.
        Cluster = 4 => "CLUSTER",
        /// A transactional id.
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        /// A delegation token.
        DelegationToken = 6 => "DELEGATION_TOKEN",
        /// A user (for delegation tokens created on its behalf).
        User = 7 => "USER",
    }
}

kafka_enum! {
    /// How an ACL's resource name is matched (Kafka's `PatternType`, KIP-290).
    PatternType {
        /// A code this broker does not know.
        Unknown = 0 => "UNKNOWN",
        /// In a filter: every pattern type, the name compared exactly.
        Any = 1 => "ANY",
        /// In a filter: the bindings that would apply to the named resource.
        Match = 2 => "MATCH",
        /// The name is the resource's name, or `*` for every resource of the type.
        Literal = 3 => "LITERAL",
        /// The name is a prefix of the resource's name.
        Prefixed = 4 => "PREFIXED",
    }
}

kafka_enum! {
    /// An operation on a resource (Kafka's `AclOperation`).
    AclOperation {
        /// A code this broker does not know.
        Unknown = 0 => "UNKNOWN",
        /// In a filter: every operation.
        Any = 1 => "ANY",
        /// In an ACL: every operation.
        All = 2 => "ALL",
        /// Read.
        Read = 3 => "READ",
        /// Write.
        Write = 4 => "WRITE",
        /// Create.
        Create = 5 => "CREATE",
        /// Delete.
        Delete = 6 => "DELETE",
        /// Alter.
        Alter = 7 => "ALTER",
        /// Describe.
        Describe = 8 => "DESCRIBE",
        /// Inter-broker actions on the cluster.
        ClusterAction = 9 => "CLUSTER_ACTION",
        /// Describe configs.
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        /// Alter configs.
        AlterConfigs = 11 => "ALTER_CONFIGS",
        /// Idempotent produce.
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        /// Create delegation tokens.
        CreateTokens = 13 => "CREATE_TOKENS",
        /// Describe delegation tokens.
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    AclPermissionType {
        /// A code this broker does not know.
        Unknown = 0 => "UNKNOWN",
        /// In a filter: both.
        Any = 1 => "ANY",
        /// The ACL denies.
        Deny = 2 => "DENY",
        /// The ACL allows.
        Allow = 3 => "ALLOW",
    }
}

impl AclOperation {
    /// True when an ALLOW ACL for `self` also allows `requested` (Kafka's `findResult`): the
    /// operation itself, everything for `ALL`, DESCRIBE for READ, WRITE, DELETE and ALTER, and
    /// DESCRIBE_CONFIGS for ALTER_CONFIGS.
    pub fn allow_implies(self, requested: AclOperation) -> bool {
        use AclOperation as Op;
        match (self, requested) {
            (Op::All, _) => true,
            (_, Op::Describe) => matches!(
                self,
                Op::Describe | Op::Read | Op::Write | Op::Delete | Op::Alter
            ),
            (_, Op::DescribeConfigs) => matches!(self, Op::DescribeConfigs | Op::AlterConfigs),
            _ => self == requested,
        }
    }

    /// This operation's bit in an `authorized_operations` bitfield. Codes run 0..=14, so the
    /// shift stays inside the 32 bits.
    pub const fn bit(self) -> i32 {
        1 << self.code()
    }

    /// True when a DENY ACL for `self` denies `requested`: only the operation itself, or
    /// everything for `ALL`. Implication is for ALLOW only.
    pub fn deny_implies(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }
}

impl ResourceType {
    /// The operations Kafka reports in an `authorized_operations` field for a resource of this
    /// type (Kafka's `AclEntry.supportedOperations`, the 4.x set with group configs); empty for
    /// `Any` and `Unknown`.
    pub const fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation as Op;
        match self {
            ResourceType::Topic => &[
                Op::Read,
                Op::Write,
                Op::Create,
                Op::Delete,
                Op::Alter,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Group => &[
                Op::Read,
                Op::Delete,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Cluster => &[
                Op::Create,
                Op::Alter,
                Op::Describe,
                Op::ClusterAction,
                Op::DescribeConfigs,
                Op::AlterConfigs,
                Op::IdempotentWrite,
            ],
            ResourceType::TransactionalId => &[Op::Write, Op::Describe],
            ResourceType::DelegationToken => &[Op::Describe],
            ResourceType::User => &[Op::CreateTokens, Op::DescribeTokens],
            ResourceType::Any | ResourceType::Unknown => &[],
        }
    }
}

/// The `authorized_operations` bitfield of Metadata, DescribeGroups and DescribeCluster: bit
/// `code` set for each operation (Kafka's `Utils.to32BitField`).
pub fn to_bitfield(operations: &[AclOperation]) -> i32 {
    operations.iter().fold(0, |bits, op| bits | op.bit())
}

/// The operations set in an `authorized_operations` bitfield, in code order.
pub fn from_bitfield(bits: i32) -> Vec<AclOperation> {
    AclOperation::VALUES
        .iter()
        .copied()
        .filter(|op| bits & op.bit() != 0)
        .collect()
}

/// A binding is refused (CreateAcls, DeleteAcls filters, `super.users`, a decoded record). Every
/// variant is Kafka's `INVALID_REQUEST`; the text is Kafka's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// A CLUSTER binding names something other than `kafka-cluster`.
    #[error("The only valid name for the CLUSTER resource is kafka-cluster")]
    ClusterName {
        /// The name the binding carried.
        name: String,
    },
    /// The resource name is empty.
    #[error("Invalid empty resource name")]
    EmptyResourceName,
    /// The resource type is `ANY` or `UNKNOWN`.
    #[error("Invalid resourceType {0}")]
    InvalidResourceType(ResourceType),
    /// The pattern type is not LITERAL or PREFIXED.
    #[error("Invalid patternType {0}")]
    InvalidPatternType(PatternType),
    /// The operation is `ANY` or `UNKNOWN`.
    #[error("Invalid operation {0}")]
    InvalidOperation(AclOperation),
    /// The permission is not ALLOW or DENY.
    #[error("Invalid permissionType {0}")]
    InvalidPermissionType(AclPermissionType),
    /// The principal has no `:` between its type and its name.
    #[error(
        "Could not parse principal from `{principal}` (no colon is present separating the \
         principal type from the principal name)"
    )]
    PrincipalWithoutColon {
        /// The principal the binding carried.
        principal: String,
    },
    /// A string is longer than [`ACL_STRING_BYTES_MAX`].
    #[error("The {field} of an ACL is {bytes} bytes, longer than the {max} bytes allowed")]
    FieldTooLong {
        /// `resource name`, `principal` or `host`.
        field: &'static str,
        /// Its length.
        bytes: usize,
        /// [`ACL_STRING_BYTES_MAX`].
        max: usize,
    },
    /// A filter's resource type or pattern type is `UNKNOWN`.
    #[error("Unknown patternFilter.")]
    UnknownPatternFilter,
    /// A filter's operation or permission is `UNKNOWN`.
    #[error("Unknown entryFilter.")]
    UnknownEntryFilter,
    /// An entry of `super.users` is not of the form `Type:name`.
    #[error("expected a string in format principalType:principalName but got {0}")]
    SuperUserFormat(String),
}

/// One ACL: who (`principal` from `host`) may or may not (`permission`) do what (`operation`)
/// to which resources (`resource_type`, `name`, `pattern_type`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// The type of the resources.
    pub resource_type: ResourceType,
    /// The resource name, `*` (LITERAL) for all, or a prefix (PREFIXED).
    pub name: String,
    /// LITERAL or PREFIXED.
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// The client's address as the broker sees it, or `*` for every host.
    pub host: String,
    /// The operation; `ALL` for every operation.
    pub operation: AclOperation,
    /// ALLOW or DENY.
    pub permission: AclPermissionType,
}

impl AclBinding {
    /// Checks a binding to create, in Kafka's order (the CreateAcls handler's checks, then the
    /// controller's `validateNewAcl`), returning Kafka's first complaint.
    pub fn validate(&self) -> Result<(), AclError> {
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_RESOURCE_NAME {
            return Err(AclError::ClusterName {
                name: self.name.clone(),
            });
        }
        if self.name.is_empty() {
            return Err(AclError::EmptyResourceName);
        }
        if matches!(
            self.resource_type,
            ResourceType::Unknown | ResourceType::Any
        ) {
            return Err(AclError::InvalidResourceType(self.resource_type));
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return Err(AclError::InvalidPatternType(self.pattern_type));
        }
        if matches!(self.operation, AclOperation::Unknown | AclOperation::Any) {
            return Err(AclError::InvalidOperation(self.operation));
        }
        if !matches!(
            self.permission,
            AclPermissionType::Allow | AclPermissionType::Deny
        ) {
            return Err(AclError::InvalidPermissionType(self.permission));
        }
        if !self.principal.contains(':') {
            return Err(AclError::PrincipalWithoutColon {
                principal: self.principal.clone(),
            });
        }
        for (field, text) in [
            ("resource name", &self.name),
            ("principal", &self.principal),
            ("host", &self.host),
        ] {
            if text.len() > ACL_STRING_BYTES_MAX {
                return Err(AclError::FieldTooLong {
                    field,
                    bytes: text.len(),
                    max: ACL_STRING_BYTES_MAX,
                });
            }
        }
        Ok(())
    }

    /// The filter that matches exactly this binding.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: self.resource_type,
            name: Some(self.name.clone()),
            pattern_type: self.pattern_type,
            principal: Some(self.principal.clone()),
            host: Some(self.host.clone()),
            operation: self.operation,
            permission: self.permission,
        }
    }

    /// The versioned binary form the metadata log stores. Layout (version 1), integers
    /// big-endian:
    ///
    /// ```text
    /// u8 version = 1 | i8 resource_type | i8 pattern_type | i8 operation | i8 permission
    /// | u16 name_len | name | u16 principal_len | principal | u16 host_len | host
    /// ```
    ///
    /// Refuses a binding [`validate`](Self::validate) refuses, so the log never holds one.
    pub fn encode(&self) -> Result<Vec<u8>, AclError> {
        self.validate()?;
        let strings = [&self.name, &self.principal, &self.host];
        let mut out = Vec::with_capacity(5 + strings.iter().map(|s| 2 + s.len()).sum::<usize>());
        out.push(ACL_ENCODING_VERSION);
        for code in [
            self.resource_type.code(),
            self.pattern_type.code(),
            self.operation.code(),
            self.permission.code(),
        ] {
            out.extend_from_slice(&code.to_be_bytes());
        }
        for text in strings {
            // validate() bounded every string by ACL_STRING_BYTES_MAX, which fits a u16.
            let len = u16::try_from(text.len()).map_err(|_| AclError::FieldTooLong {
                field: "string",
                bytes: text.len(),
                max: ACL_STRING_BYTES_MAX,
            })?;
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        Ok(out)
    }

    /// Reads the form [`encode`](Self::encode) writes. Any malformed input (short, a version or
    /// code it does not know, a string that is not UTF-8, bytes left over, a binding that does
    /// not validate) is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<AclBinding, AclDecodeError> {
        let mut reader = Reader { bytes, position: 0 };
        let [version] = reader.array::<1>()?;
        if version != ACL_ENCODING_VERSION {
            return Err(AclDecodeError::UnsupportedVersion { version });
        }
        let resource_type = reader.code("resource_type", ResourceType::from_code, |v| v.code())?;
        let pattern_type = reader.code("pattern_type", PatternType::from_code, |v| v.code())?;
        let operation = reader.code("operation", AclOperation::from_code, |v| v.code())?;
        let permission = reader.code("permission", AclPermissionType::from_code, |v| v.code())?;
        let name = reader.string("name")?;
        let principal = reader.string("principal")?;
        let host = reader.string("host")?;
        if reader.position != bytes.len() {
            return Err(AclDecodeError::TrailingBytes {
                position: reader.position,
                remaining: bytes.len() - reader.position,
            });
        }
        let binding = AclBinding {
            resource_type,
            name,
            pattern_type,
            principal,
            host,
            operation,
            permission,
        };
        binding.validate()?;
        Ok(binding)
    }
}

/// Why [`AclBinding::decode`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclDecodeError {
    /// The input ended inside a field.
    #[error("ACL record truncated at byte {position}: needed {needed} bytes, {available} left")]
    Truncated {
        /// Where the field starts.
        position: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// A version this broker cannot read.
    #[error("ACL record version {version} is not supported")]
    UnsupportedVersion {
        /// The version byte.
        version: u8,
    },
    /// A code Kafka does not define.
    #[error("ACL record {field} code {code} is unknown")]
    UnknownCode {
        /// Which enum.
        field: &'static str,
        /// The code read.
        code: i8,
    },
    /// A string that is not UTF-8.
    #[error("ACL record {field} is not UTF-8")]
    InvalidUtf8 {
        /// Which string.
        field: &'static str,
    },
    /// Bytes after the last field.
    #[error("ACL record has {remaining} bytes after its end at byte {position}")]
    TrailingBytes {
        /// Where the record ended.
        position: usize,
        /// How many bytes follow.
        remaining: usize,
    },
    /// The fields decode but do not make a valid binding.
    #[error("ACL record is invalid: {0}")]
    Invalid(#[from] AclError),
}

/// A cursor over a record that hands out fields or says why it cannot.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, needed: usize) -> Result<&'a [u8], AclDecodeError> {
        let truncated = AclDecodeError::Truncated {
            position: self.position,
            needed,
            available: self.bytes.len().saturating_sub(self.position),
        };
        let end = self.position.checked_add(needed).ok_or(truncated.clone())?;
        let field = self.bytes.get(self.position..end).ok_or(truncated)?;
        self.position = end;
        Ok(field)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], AclDecodeError> {
        let position = self.position;
        let field = self.take(N)?;
        // take() returned exactly N bytes; the error arm only keeps this free of a panic path.
        <[u8; N]>::try_from(field).map_err(|_| AclDecodeError::Truncated {
            position,
            needed: N,
            available: field.len(),
        })
    }

    fn code<T>(
        &mut self,
        field: &'static str,
        from_code: fn(i8) -> T,
        code_of: fn(&T) -> i8,
    ) -> Result<T, AclDecodeError> {
        let code = i8::from_be_bytes(self.array::<1>()?);
        let value = from_code(code);
        // `from_code` maps an undefined code to UNKNOWN (code 0); only 0 itself is UNKNOWN.
        if code_of(&value) != code {
            return Err(AclDecodeError::UnknownCode { field, code });
        }
        Ok(value)
    }

    fn string(&mut self, field: &'static str) -> Result<String, AclDecodeError> {
        let len = usize::from(u16::from_be_bytes(self.array::<2>()?));
        let text = self.take(len)?;
        std::str::from_utf8(text)
            .map(str::to_owned)
            .map_err(|_| AclDecodeError::InvalidUtf8 { field })
    }
}

/// Selects bindings for DescribeAcls and DeleteAcls (Kafka's `AclBindingFilter`): `ANY` and
/// `None` match everything; a pattern type of MATCH matches the bindings that would apply to
/// the named resource (LITERAL with the name, LITERAL `*`, PREFIXED with a prefix of it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    /// A type, or `Any`.
    pub resource_type: ResourceType,
    /// A name, or `None` for every name.
    pub name: Option<String>,
    /// A pattern type, `Any`, or `Match`.
    pub pattern_type: PatternType,
    /// A principal, or `None` for every principal. `User:*` matches only wildcard ACLs.
    pub principal: Option<String>,
    /// A host, or `None` for every host. `*` matches only wildcard ACLs.
    pub host: Option<String>,
    /// An operation, or `Any`.
    pub operation: AclOperation,
    /// A permission, or `Any`.
    pub permission: AclPermissionType,
}

impl AclBindingFilter {
    /// The filter that matches every binding.
    pub fn any() -> Self {
        AclBindingFilter {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: AclPermissionType::Any,
        }
    }

    /// Refuses a filter with an UNKNOWN part, as Kafka's DeleteAcls does (`validateFilter`).
    pub fn validate(&self) -> Result<(), AclError> {
        if self.resource_type.is_unknown() || self.pattern_type.is_unknown() {
            return Err(AclError::UnknownPatternFilter);
        }
        if self.operation.is_unknown() || self.permission.is_unknown() {
            return Err(AclError::UnknownEntryFilter);
        }
        Ok(())
    }

    /// True when the filter selects `binding` (Kafka's `ResourcePatternFilter.matches` and
    /// `AccessControlEntryFilter.matches`).
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(binding.resource_type, &binding.name, binding.pattern_type)
            && self.matches_entry(
                &binding.principal,
                &binding.host,
                binding.operation,
                binding.permission,
            )
    }

    fn matches_pattern(
        &self,
        resource_type: ResourceType,
        name: &str,
        pattern: PatternType,
    ) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != pattern
        {
            return false;
        }
        let Some(wanted) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern {
            return wanted == name;
        }
        // The filter is MATCH: does the binding's pattern apply to the resource `wanted`?
        match pattern {
            PatternType::Literal => wanted == name || name == WILDCARD,
            PatternType::Prefixed => wanted.starts_with(name),
            // Kafka throws on a stored binding of any other pattern type; none is ever stored.
            _ => false,
        }
    }

    fn matches_entry(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> bool {
        self.principal.as_deref().is_none_or(|p| p == principal)
            && self.host.as_deref().is_none_or(|h| h == host)
            && (self.operation == AclOperation::Any || self.operation == operation)
            && (self.permission == AclPermissionType::Any || self.permission == permission)
    }
}

/// The answer of [`Authorizer::authorize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The request may proceed.
    Allowed,
    /// The request is refused with the resource's authorization error.
    Denied,
}

/// Parses Kafka's `super.users`: principals separated by `;`, blanks around each ignored, e.g.
/// `User:admin;User:ops`. An entry without a `:` is an error, as in Kafka.
pub fn parse_super_users(config: &str) -> Result<HashSet<String>, AclError> {
    let mut users = HashSet::new();
    for entry in config.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        if !entry.contains(':') {
            return Err(AclError::SuperUserFormat(entry.to_owned()));
        }
        users.insert(entry.to_owned());
    }
    Ok(users)
}

/// The part of a binding that is not its resource pattern; the index keys on the pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct AclEntry {
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermissionType,
}

impl AclEntry {
    /// What this ACL says about the request, or `None` when it does not match it. Assumes the
    /// resource already matched.
    fn decide(&self, principal: &str, host: &str, op: AclOperation) -> Option<Decision> {
        if self.principal != principal && self.principal != WILDCARD_PRINCIPAL {
            return None;
        }
        if self.host != host && self.host != WILDCARD {
            return None;
        }
        match self.permission {
            AclPermissionType::Allow if self.operation.allow_implies(op) => Some(Decision::Allowed),
            AclPermissionType::Deny if self.operation.deny_implies(op) => Some(Decision::Denied),
            _ => None,
        }
    }
}

/// The ACLs of one resource type. LITERAL names (with `*`) are looked up by hash; PREFIXED ones
/// are ordered so the prefixes of a name are found without visiting the others.
#[derive(Debug, Default)]
struct TypeIndex {
    literal: HashMap<String, BTreeSet<AclEntry>>,
    prefixed: BTreeMap<String, BTreeSet<AclEntry>>,
}

impl TypeIndex {
    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.prefixed.is_empty()
    }

    /// Calls `visit` with the ACL set of every pattern that applies to `name` (LITERAL `name`,
    /// LITERAL `*`, PREFIXED prefixes of `name`) until it returns `true` (done).
    fn for_each_applying(&self, name: &str, mut visit: impl FnMut(&BTreeSet<AclEntry>) -> bool) {
        if let Some(entries) = self.literal.get(name) {
            if visit(entries) {
                return;
            }
        }
        if name != WILDCARD {
            if let Some(entries) = self.literal.get(WILDCARD) {
                if visit(entries) {
                    return;
                }
            }
        }
        // Walk down from the greatest key <= name. A key that is a prefix of `name` applies,
        // and every shorter prefix sorts below it. A key that is not a prefix shares `common`
        // leading characters with `name` and sorts below it, so no longer prefix of `name` can
        // sort between it and `name[..common]`: the walk jumps there. Each miss shares fewer
        // characters with `name` than the one before, so a check visits the matching prefixes
        // plus at most one miss per character of `name`, however many ACLs the type holds.
        let mut upper = Bound::Included(name);
        while let Some((key, entries)) = self
            .prefixed
            .range::<str, _>((Bound::Unbounded, upper))
            .next_back()
        {
            if name.starts_with(key.as_str()) {
                if visit(entries) {
                    return;
                }
                upper = Bound::Excluded(key.as_str());
            } else {
                upper = match name.get(..common_prefix_bytes(name, key)) {
                    Some(common) => Bound::Included(common),
                    // Not reached: the length ends on a character of `name`. Stepping one key
                    // down is slower but still right.
                    None => Bound::Excluded(key.as_str()),
                };
            }
        }
    }
}

/// The byte length of the longest common prefix of `a` and `b` that ends on a character boundary.
fn common_prefix_bytes(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i)
}

/// The ACLs of a broker and Kafka's `StandardAuthorizer` decisions over them. Holds each binding
/// once; adding one that is already there changes nothing, as in Kafka.
#[derive(Debug, Default)]
pub struct Authorizer {
    /// Principals (`User:admin`) allowed everything, from `super.users`.
    pub super_users: HashSet<String>,
    /// The answer when no ACL applies to the resource (`allow.everyone.if.no.acl.found`).
    pub allow_everyone_if_no_acl_found: bool,
    by_type: HashMap<ResourceType, TypeIndex>,
    count: usize,
}

impl Authorizer {
    /// An authorizer with no ACLs.
    pub fn new(super_users: HashSet<String>, allow_everyone_if_no_acl_found: bool) -> Self {
        Authorizer {
            super_users,
            allow_everyone_if_no_acl_found,
            by_type: HashMap::new(),
            count: 0,
        }
    }

    /// How many bindings it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when it holds no binding.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds the bindings, all or none: if any fails [`AclBinding::validate`], nothing is added
    /// and that error is returned. Returns how many were new (a binding already held is not
    /// added twice).
    pub fn add(&mut self, bindings: Vec<AclBinding>) -> Result<usize, AclError> {
        for binding in &bindings {
            binding.validate()?;
        }
        let mut added = 0;
        for binding in bindings {
            let entry = AclEntry {
                principal: binding.principal,
                host: binding.host,
                operation: binding.operation,
                permission: binding.permission,
            };
            let index = self.by_type.entry(binding.resource_type).or_default();
            let inserted = match binding.pattern_type {
                PatternType::Literal => {
                    index.literal.entry(binding.name).or_default().insert(entry)
                }
                PatternType::Prefixed => index
                    .prefixed
                    .entry(binding.name)
                    .or_default()
                    .insert(entry),
                // validate() admitted only LITERAL and PREFIXED.
                _ => false,
            };
            added += usize::from(inserted);
        }
        self.count += added;
        Ok(added)
    }

    /// The bindings `filter` selects, sorted. Scans every ACL of the selected types: this
    /// serves DescribeAcls and DeleteAcls, never a produce or fetch.
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let mut found = Vec::new();
        for (&resource_type, index) in &self.by_type {
            if filter.resource_type != ResourceType::Any && filter.resource_type != resource_type {
                continue;
            }
            let literal = index
                .literal
                .iter()
                .map(|(n, e)| (n, PatternType::Literal, e));
            let prefixed = index
                .prefixed
                .iter()
                .map(|(n, e)| (n, PatternType::Prefixed, e));
            for (name, pattern_type, entries) in literal.chain(prefixed) {
                if !filter.matches_pattern(resource_type, name, pattern_type) {
                    continue;
                }
                for entry in entries {
                    if filter.matches_entry(
                        &entry.principal,
                        &entry.host,
                        entry.operation,
                        entry.permission,
                    ) {
                        found.push(binding_of(resource_type, name, pattern_type, entry));
                    }
                }
            }
        }
        found.sort();
        found
    }

    /// Removes the bindings `filter` selects and returns them, sorted.
    pub fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let removed = self.describe(filter);
        for binding in &removed {
            self.remove_one(binding);
        }
        self.count -= removed.len();
        removed
    }

    fn remove_one(&mut self, binding: &AclBinding) {
        let Some(index) = self.by_type.get_mut(&binding.resource_type) else {
            return;
        };
        let entry = AclEntry {
            principal: binding.principal.clone(),
            host: binding.host.clone(),
            operation: binding.operation,
            permission: binding.permission,
        };
        match binding.pattern_type {
            PatternType::Literal => index.literal.remove_entry_of(&binding.name, &entry),
            PatternType::Prefixed => index.prefixed.remove_entry_of(&binding.name, &entry),
            _ => {}
        }
        if index.is_empty() {
            self.by_type.remove(&binding.resource_type);
        }
    }

    /// May `principal` (`User:alice`), connected from `host` (the client's address), do `op`
    /// on the resource `resource_type`/`name`? Kafka's rules; see the module doc.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        if self.super_users.contains(principal) {
            return Decision::Allowed;
        }
        let mut resource_has_acls = false;
        let mut allowed = false;
        let mut denied = false;
        if let Some(index) = self.by_type.get(&resource_type) {
            index.for_each_applying(name, |entries| {
                resource_has_acls |= !entries.is_empty();
                for entry in entries {
                    match entry.decide(principal, host, op) {
                        Some(Decision::Denied) => {
                            denied = true;
                            return true;
                        }
                        Some(Decision::Allowed) => allowed = true,
                        None => {}
                    }
                }
                false
            });
        }
        // A DENY wins; else an ALLOW; else the default, but only when no ACL at all applies
        // to the resource (an ACL for someone else means "not you").
        let default_allows = !resource_has_acls && self.allow_everyone_if_no_acl_found;
        if !denied && (allowed || default_allows) {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    /// May `principal` do `op` on at least one resource of `resource_type`? Kafka's
    /// `authorizeByResourceType` (KIP-679), which InitProducerId asks with WRITE on TOPIC for an
    /// idempotent producer lacking IDEMPOTENT_WRITE on the cluster. Allowed when a check on a
    /// made-up name is (super users, the no-ACL default, `*` and `User:*` ACLs); else when an
    /// ALLOW ACL for exactly `op` or `ALL` (no implied DESCRIBE here, as in Kafka) names a
    /// LITERAL resource no LITERAL or PREFIXED DENY covers, or a prefix no PREFIXED DENY covers.
    /// A DENY on LITERAL `*` denies.
    pub fn authorize_by_resource_type(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        // Kafka's own made-up name: a resource no real ACL is likely to name.
        const PROBE_NAME: &str = "hardcode";
        if self.authorize(principal, host, op, resource_type, PROBE_NAME) == Decision::Allowed {
            return Decision::Allowed;
        }
        let Some(index) = self.by_type.get(&resource_type) else {
            return Decision::Denied;
        };
        let has = |entries: &BTreeSet<AclEntry>, permission: AclPermissionType| {
            entries.iter().any(|e| {
                e.permission == permission
                    && (e.principal == principal || e.principal == WILDCARD_PRINCIPAL)
                    && (e.host == host || e.host == WILDCARD)
                    && (e.operation == op || e.operation == AclOperation::All)
            })
        };
        if let Some(entries) = index.literal.get(WILDCARD) {
            if has(entries, AclPermissionType::Deny) {
                return Decision::Denied;
            }
            if has(entries, AclPermissionType::Allow) {
                return Decision::Allowed;
            }
        }
        let denied_prefixes: HashSet<&str> = index
            .prefixed
            .iter()
            .filter(|(_, entries)| has(entries, AclPermissionType::Deny))
            .map(|(prefix, _)| prefix.as_str())
            .collect();
        let dominated = |name: &str| {
            name.char_indices()
                .filter_map(|(i, c)| name.get(..i + c.len_utf8()))
                .any(|prefix| denied_prefixes.contains(prefix))
        };
        let literal_allowed = index.literal.iter().any(|(name, entries)| {
            name != WILDCARD
                && has(entries, AclPermissionType::Allow)
                && !has(entries, AclPermissionType::Deny)
                && !dominated(name)
        });
        let prefix_allowed = index
            .prefixed
            .iter()
            .any(|(prefix, entries)| has(entries, AclPermissionType::Allow) && !dominated(prefix));
        if literal_allowed || prefix_allowed {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    /// The operations of [`ResourceType::supported_operations`] that `principal` may do on the
    /// resource, in that order: what Metadata, DescribeGroups and DescribeCluster report
    /// (through [`to_bitfield`]).
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        name: &str,
    ) -> Vec<AclOperation> {
        resource_type
            .supported_operations()
            .iter()
            .copied()
            .filter(|&op| {
                self.authorize(principal, host, op, resource_type, name) == Decision::Allowed
            })
            .collect()
    }
}

/// The two maps of a [`TypeIndex`], so removal is written once.
trait EntryMap {
    fn remove_entry_of(&mut self, name: &str, entry: &AclEntry);
}

impl EntryMap for HashMap<String, BTreeSet<AclEntry>> {
    fn remove_entry_of(&mut self, name: &str, entry: &AclEntry) {
        if let Some(entries) = self.get_mut(name) {
            entries.remove(entry);
            if entries.is_empty() {
                self.remove(name);
            }
        }
    }
}

impl EntryMap for BTreeMap<String, BTreeSet<AclEntry>> {
    fn remove_entry_of(&mut self, name: &str, entry: &AclEntry) {
        if let Some(entries) = self.get_mut(name) {
            entries.remove(entry);
            if entries.is_empty() {
                self.remove(name);
            }
        }
    }
}

fn binding_of(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    entry: &AclEntry,
) -> AclBinding {
    AclBinding {
        resource_type,
        name: name.to_owned(),
        pattern_type,
        principal: entry.principal.clone(),
        host: entry.host.clone(),
        operation: entry.operation,
        permission: entry.permission,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALICE: &str = "User:alice";
    const BOB: &str = "User:bob";
    const HOST: &str = "10.0.0.1";
    const OTHER_HOST: &str = "10.0.0.2";

    fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            name: name.to_owned(),
            pattern_type,
            principal: principal.to_owned(),
            host: host.to_owned(),
            operation,
            permission,
        }
    }

    fn allow_topic(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(
            ResourceType::Topic,
            name,
            pattern,
            principal,
            WILDCARD,
            op,
            AclPermissionType::Allow,
        )
    }

    fn deny_topic(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(
            ResourceType::Topic,
            name,
            pattern,
            principal,
            WILDCARD,
            op,
            AclPermissionType::Deny,
        )
    }

    fn authorizer(bindings: Vec<AclBinding>) -> Authorizer {
        let mut authorizer = Authorizer::new(HashSet::new(), false);
        let n = bindings.len();
        assert_eq!(authorizer.add(bindings), Ok(n));
        authorizer
    }

    fn topic(a: &Authorizer, principal: &str, op: AclOperation, name: &str) -> Decision {
        a.authorize(principal, HOST, op, ResourceType::Topic, name)
    }

    use AclOperation as Op;
    use Decision::{Allowed, Denied};
    use PatternType::{Literal, Prefixed};

    #[test]
    fn codes_round_trip_and_unknown_fallback() {
        for &v in ResourceType::VALUES {
            assert_eq!(ResourceType::from_code(v.code()), v);
            assert_eq!(ResourceType::from_name(&v.name().to_lowercase()), v);
        }
        for &v in PatternType::VALUES {
            assert_eq!(PatternType::from_code(v.code()), v);
        }
        for &v in AclOperation::VALUES {
            assert_eq!(AclOperation::from_code(v.code()), v);
            assert_eq!(AclOperation::from_name(v.name()), v);
        }
        for &v in AclPermissionType::VALUES {
            assert_eq!(AclPermissionType::from_code(v.code()), v);
        }
        assert_eq!(ResourceType::Topic.code(), 2);
        assert_eq!(ResourceType::User.code(), 7);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(AclOperation::DescribeTokens.code(), 14);
        assert_eq!(AclOperation::IdempotentWrite.code(), 12);
        assert_eq!(AclPermissionType::Allow.code(), 3);
        assert_eq!(ResourceType::from_code(99), ResourceType::Unknown);
        assert_eq!(AclOperation::from_code(-1), AclOperation::Unknown);
        assert_eq!(PatternType::from_name("nope"), PatternType::Unknown);
        assert_eq!(AclOperation::ClusterAction.to_string(), "CLUSTER_ACTION");
    }

    #[test]
    fn literal_allow_and_default_deny() {
        let a = authorizer(vec![allow_topic("orders", Literal, ALICE, Op::Read)]);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders"), Denied);
        assert_eq!(topic(&a, BOB, Op::Read, "orders"), Denied);
        // A literal name never matches a longer or shorter one.
        assert_eq!(topic(&a, ALICE, Op::Read, "orders2"), Denied);
        assert_eq!(topic(&a, ALICE, Op::Read, "order"), Denied);
        assert_eq!(
            a.authorize(ALICE, HOST, Op::Read, ResourceType::Group, "orders"),
            Denied
        );
    }

    #[test]
    fn prefixed_matches_names_starting_with_prefix() {
        let a = authorizer(vec![allow_topic("orders-", Prefixed, ALICE, Op::Write)]);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders-eu"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders-"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders"), Denied);
        assert_eq!(topic(&a, ALICE, Op::Write, "xorders-eu"), Denied);
    }

    #[test]
    fn prefix_walk_jumps_over_non_prefixes() {
        // Sorted keys between "f" and "foobar" that are not prefixes of it must not hide "f".
        let a = authorizer(vec![
            allow_topic("f", Prefixed, ALICE, Op::Read),
            allow_topic("fa", Prefixed, BOB, Op::Read),
            allow_topic("fb", Prefixed, BOB, Op::Read),
            allow_topic("fooa", Prefixed, BOB, Op::Read),
            allow_topic("foobaz", Prefixed, BOB, Op::Read),
            deny_topic("foo", Prefixed, BOB, Op::Read),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "foobar"), Allowed);
        assert_eq!(topic(&a, BOB, Op::Read, "foobar"), Denied);
        assert_eq!(topic(&a, BOB, Op::Read, "fbx"), Allowed);
    }

    #[test]
    fn deny_beats_allow_from_any_pattern() {
        let a = authorizer(vec![
            allow_topic("orders", Literal, ALICE, Op::Read),
            deny_topic("ord", Prefixed, ALICE, Op::Read),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Denied);
        let a = authorizer(vec![
            allow_topic("ord", Prefixed, ALICE, Op::All),
            deny_topic(WILDCARD, Literal, WILDCARD_PRINCIPAL, Op::Write),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders"), Denied);
    }

    #[test]
    fn wildcard_principal_host_and_resource() {
        let a = authorizer(vec![acl(
            ResourceType::Topic,
            WILDCARD,
            Literal,
            WILDCARD_PRINCIPAL,
            WILDCARD,
            Op::Read,
            AclPermissionType::Allow,
        )]);
        assert_eq!(topic(&a, ALICE, Op::Read, "anything"), Allowed);
        assert_eq!(topic(&a, BOB, Op::Read, "*"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "anything"), Denied);
        // Only User:* is a wildcard; Group:* is a principal like any other.
        let a = authorizer(vec![allow_topic("t", Literal, "Group:*", Op::Read)]);
        assert_eq!(topic(&a, "Group:ops", Op::Read, "t"), Denied);
        assert_eq!(topic(&a, "Group:*", Op::Read, "t"), Allowed);
    }

    #[test]
    fn host_must_match_unless_wildcard() {
        let a = authorizer(vec![acl(
            ResourceType::Topic,
            "t",
            Literal,
            ALICE,
            HOST,
            Op::Read,
            AclPermissionType::Allow,
        )]);
        assert_eq!(
            a.authorize(ALICE, HOST, Op::Read, ResourceType::Topic, "t"),
            Allowed
        );
        assert_eq!(
            a.authorize(ALICE, OTHER_HOST, Op::Read, ResourceType::Topic, "t"),
            Denied
        );
        let mut a = a;
        a.add(vec![acl(
            ResourceType::Topic,
            "t",
            Literal,
            ALICE,
            OTHER_HOST,
            Op::Read,
            AclPermissionType::Deny,
        )])
        .expect("valid");
        assert_eq!(
            a.authorize(ALICE, HOST, Op::Read, ResourceType::Topic, "t"),
            Allowed
        );
    }

    #[test]
    fn super_user_is_always_allowed() {
        let mut a = authorizer(vec![deny_topic("t", Literal, WILDCARD_PRINCIPAL, Op::All)]);
        a.super_users = parse_super_users(" User:admin ; User:ops;;").expect("valid");
        assert_eq!(topic(&a, "User:admin", Op::Write, "t"), Allowed);
        assert_eq!(topic(&a, "User:ops", Op::Delete, "none"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "t"), Denied);
        assert_eq!(
            a.authorize(
                "User:admin",
                HOST,
                Op::ClusterAction,
                ResourceType::Cluster,
                CLUSTER_RESOURCE_NAME
            ),
            Allowed
        );
    }

    #[test]
    fn super_users_parser() {
        let users = parse_super_users("User:admin;User:ops").expect("valid");
        assert_eq!(users.len(), 2);
        assert!(users.contains("User:ops"));
        assert!(parse_super_users("").expect("empty").is_empty());
        let err = parse_super_users("User:admin;ops").expect_err("no colon");
        assert_eq!(
            err.to_string(),
            "expected a string in format principalType:principalName but got ops"
        );
    }

    #[test]
    fn allow_everyone_if_no_acl_found_both_ways() {
        let mut a = authorizer(vec![allow_topic("t", Literal, BOB, Op::Read)]);
        assert_eq!(topic(&a, ALICE, Op::Read, "other"), Denied);
        a.allow_everyone_if_no_acl_found = true;
        assert_eq!(topic(&a, ALICE, Op::Read, "other"), Allowed);
        // An ACL for someone else on the resource means the default no longer applies.
        assert_eq!(topic(&a, ALICE, Op::Read, "t"), Denied);
        // ACLs on another resource type do not count.
        assert_eq!(
            a.authorize(ALICE, HOST, Op::Read, ResourceType::Group, "t"),
            Allowed
        );
        let empty = Authorizer::new(HashSet::new(), true);
        assert_eq!(topic(&empty, ALICE, Op::Write, "t"), Allowed);
        let empty = Authorizer::new(HashSet::new(), false);
        assert_eq!(topic(&empty, ALICE, Op::Write, "t"), Denied);
    }

    #[test]
    fn implied_describe_only_for_allow() {
        for op in [Op::Read, Op::Write, Op::Delete, Op::Alter, Op::Describe] {
            let a = authorizer(vec![allow_topic("t", Literal, ALICE, op)]);
            assert_eq!(topic(&a, ALICE, Op::Describe, "t"), Allowed, "{op}");
        }
        for op in [Op::Create, Op::AlterConfigs, Op::DescribeConfigs] {
            let a = authorizer(vec![allow_topic("t", Literal, ALICE, op)]);
            assert_eq!(topic(&a, ALICE, Op::Describe, "t"), Denied, "{op}");
        }
        let a = authorizer(vec![allow_topic("t", Literal, ALICE, Op::AlterConfigs)]);
        assert_eq!(topic(&a, ALICE, Op::DescribeConfigs, "t"), Allowed);
        let a = authorizer(vec![allow_topic("t", Literal, ALICE, Op::DescribeConfigs)]);
        assert_eq!(topic(&a, ALICE, Op::AlterConfigs, "t"), Denied);
        // Implication is one way: DESCRIBE does not grant READ.
        let a = authorizer(vec![allow_topic("t", Literal, ALICE, Op::Describe)]);
        assert_eq!(topic(&a, ALICE, Op::Read, "t"), Denied);
        // A DENY denies only its own operation.
        let a = authorizer(vec![
            allow_topic("t", Literal, ALICE, Op::All),
            deny_topic("t", Literal, ALICE, Op::Describe),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "t"), Allowed);
        assert_eq!(topic(&a, ALICE, Op::Describe, "t"), Denied);
        let a = authorizer(vec![
            allow_topic("t", Literal, ALICE, Op::Describe),
            deny_topic("t", Literal, ALICE, Op::Read),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Describe, "t"), Allowed);
    }

    fn by_type(a: &Authorizer, principal: &str) -> Decision {
        a.authorize_by_resource_type(principal, HOST, Op::Write, ResourceType::Topic)
    }

    #[test]
    fn authorize_by_resource_type_follows_kip_679() {
        let a = authorizer(vec![allow_topic("foo", Prefixed, ALICE, Op::Write)]);
        assert_eq!(by_type(&a, ALICE), Allowed);
        assert_eq!(by_type(&a, BOB), Denied);
        // No implication here: READ does not count for WRITE, ALL does.
        let a = authorizer(vec![allow_topic("foo", Literal, ALICE, Op::Read)]);
        assert_eq!(by_type(&a, ALICE), Denied);
        let a = authorizer(vec![allow_topic(
            "foo",
            Literal,
            WILDCARD_PRINCIPAL,
            Op::All,
        )]);
        assert_eq!(by_type(&a, ALICE), Allowed);
        // A DENY covering every allowed name denies; one covering another name does not.
        let a = authorizer(vec![
            allow_topic("foo", Literal, ALICE, Op::Write),
            deny_topic("foo", Literal, ALICE, Op::Write),
        ]);
        assert_eq!(by_type(&a, ALICE), Denied);
        let a = authorizer(vec![
            allow_topic("foo", Literal, ALICE, Op::Write),
            deny_topic("fo", Prefixed, ALICE, Op::Write),
        ]);
        assert_eq!(by_type(&a, ALICE), Denied);
        let a = authorizer(vec![
            allow_topic("foo", Prefixed, ALICE, Op::Write),
            deny_topic("foo", Literal, ALICE, Op::Write),
        ]);
        assert_eq!(by_type(&a, ALICE), Allowed);
        let a = authorizer(vec![
            allow_topic("foo", Literal, ALICE, Op::Write),
            allow_topic("bar", Literal, ALICE, Op::Write),
            deny_topic("foo", Prefixed, ALICE, Op::Write),
        ]);
        assert_eq!(by_type(&a, ALICE), Allowed);
        // A wildcard DENY beats everything; a wildcard ALLOW allows.
        let a = authorizer(vec![
            allow_topic(WILDCARD, Literal, ALICE, Op::Write),
            deny_topic(WILDCARD, Literal, WILDCARD_PRINCIPAL, Op::Write),
        ]);
        assert_eq!(by_type(&a, ALICE), Denied);
        let a = authorizer(vec![allow_topic(WILDCARD, Literal, ALICE, Op::Write)]);
        assert_eq!(by_type(&a, ALICE), Allowed);
        // Super users, and the no-ACL default, through the made-up name.
        let mut a = authorizer(vec![deny_topic(
            WILDCARD,
            Literal,
            WILDCARD_PRINCIPAL,
            Op::All,
        )]);
        a.super_users.insert(ALICE.to_owned());
        assert_eq!(by_type(&a, ALICE), Allowed);
        let a = Authorizer::new(HashSet::new(), true);
        assert_eq!(by_type(&a, ALICE), Allowed);
        let a = Authorizer::new(HashSet::new(), false);
        assert_eq!(by_type(&a, ALICE), Denied);
    }

    #[test]
    fn all_allows_and_denies_everything() {
        let a = authorizer(vec![allow_topic("t", Literal, ALICE, Op::All)]);
        for &op in ResourceType::Topic.supported_operations() {
            assert_eq!(topic(&a, ALICE, op, "t"), Allowed, "{op}");
        }
        let a = authorizer(vec![
            allow_topic("t", Literal, ALICE, Op::Read),
            deny_topic("t", Literal, ALICE, Op::All),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "t"), Denied);
        assert_eq!(topic(&a, ALICE, Op::Describe, "t"), Denied);
    }

    #[test]
    fn authorized_operations_and_bitfield() {
        let a = authorizer(vec![
            allow_topic("t", Literal, ALICE, Op::Read),
            allow_topic("t", Literal, ALICE, Op::AlterConfigs),
        ]);
        let ops = a.authorized_operations(ALICE, HOST, ResourceType::Topic, "t");
        assert_eq!(
            ops,
            vec![
                Op::Read,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs
            ]
        );
        let bits = to_bitfield(&ops);
        assert_eq!(bits, (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11));
        let mut back = from_bitfield(bits);
        back.sort();
        let mut sorted = ops.clone();
        sorted.sort();
        assert_eq!(back, sorted);
        assert!(a
            .authorized_operations(BOB, HOST, ResourceType::Topic, "t")
            .is_empty());
        let mut admin = Authorizer::new(parse_super_users("User:admin").expect("valid"), false);
        admin.add(Vec::new()).expect("empty");
        let cluster = admin.authorized_operations(
            "User:admin",
            HOST,
            ResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
        );
        assert_eq!(cluster.len(), 7);
        // CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
        // ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
        assert_eq!(to_bitfield(&cluster), 0b1_1111_1010_0000);
    }

    #[test]
    fn filter_any_and_exact() {
        let b = allow_topic("orders", Literal, ALICE, Op::Read);
        assert!(AclBindingFilter::any().matches(&b));
        assert!(b.to_filter().matches(&b));
        let mut f = b.to_filter();
        f.principal = Some(BOB.to_owned());
        assert!(!f.matches(&b));
        let mut f = b.to_filter();
        f.host = Some(HOST.to_owned());
        assert!(
            !f.matches(&b),
            "a host filter matches the ACL's host literally"
        );
        let mut f = b.to_filter();
        f.operation = Op::Any;
        f.permission = AclPermissionType::Any;
        f.resource_type = ResourceType::Any;
        assert!(f.matches(&b));
        f.pattern_type = Prefixed;
        assert!(!f.matches(&b));
        let mut f = AclBindingFilter::any();
        f.name = Some("orders".to_owned());
        assert!(f.matches(&b));
        // ANY compares names exactly, whatever the pattern type.
        assert!(f.matches(&allow_topic("orders", Prefixed, ALICE, Op::Read)));
        assert!(!f.matches(&allow_topic("ord", Prefixed, ALICE, Op::Read)));
        assert!(!f.matches(&allow_topic(WILDCARD, Literal, ALICE, Op::Read)));
    }

    #[test]
    fn filter_match_pattern() {
        let f = AclBindingFilter {
            name: Some("orders-eu".to_owned()),
            pattern_type: PatternType::Match,
            resource_type: ResourceType::Topic,
            ..AclBindingFilter::any()
        };
        assert!(f.matches(&allow_topic("orders-eu", Literal, ALICE, Op::Read)));
        assert!(f.matches(&allow_topic(WILDCARD, Literal, ALICE, Op::Read)));
        assert!(f.matches(&allow_topic("orders-", Prefixed, ALICE, Op::Read)));
        assert!(f.matches(&allow_topic("orders-eu", Prefixed, ALICE, Op::Read)));
        assert!(!f.matches(&allow_topic("orders", Literal, ALICE, Op::Read)));
        assert!(!f.matches(&allow_topic("orders-eu-1", Prefixed, ALICE, Op::Read)));
        assert!(!f.matches(&acl(
            ResourceType::Group,
            "orders-eu",
            Literal,
            ALICE,
            WILDCARD,
            Op::Read,
            AclPermissionType::Allow
        )));
    }

    #[test]
    fn filter_validate() {
        assert_eq!(AclBindingFilter::any().validate(), Ok(()));
        let f = AclBindingFilter {
            pattern_type: PatternType::Unknown,
            ..AclBindingFilter::any()
        };
        assert_eq!(
            f.validate().map_err(|e| e.to_string()),
            Err("Unknown patternFilter.".into())
        );
        let f = AclBindingFilter {
            permission: AclPermissionType::Unknown,
            ..AclBindingFilter::any()
        };
        assert_eq!(
            f.validate().map_err(|e| e.to_string()),
            Err("Unknown entryFilter.".into())
        );
    }

    #[test]
    fn describe_and_remove() {
        let bindings = vec![
            allow_topic("orders", Literal, ALICE, Op::Read),
            allow_topic("orders", Literal, BOB, Op::Read),
            allow_topic("ord", Prefixed, BOB, Op::Write),
            allow_topic(WILDCARD, Literal, ALICE, Op::Describe),
            acl(
                ResourceType::Group,
                "g",
                Literal,
                ALICE,
                WILDCARD,
                Op::Read,
                AclPermissionType::Allow,
            ),
        ];
        let mut a = authorizer(bindings.clone());
        // Adding the same bindings again adds nothing.
        assert_eq!(a.add(bindings.clone()), Ok(0));
        assert_eq!(a.len(), 5);
        let mut all = bindings.clone();
        all.sort();
        assert_eq!(a.describe(&AclBindingFilter::any()), all);

        let alice = AclBindingFilter {
            principal: Some(ALICE.to_owned()),
            ..AclBindingFilter::any()
        };
        assert_eq!(a.describe(&alice).len(), 3);

        let matching = AclBindingFilter {
            resource_type: ResourceType::Topic,
            name: Some("orders".to_owned()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        assert_eq!(a.describe(&matching).len(), 4);

        let removed = a.remove_matching(&alice);
        assert_eq!(removed.len(), 3);
        assert_eq!(a.len(), 2);
        assert!(a.describe(&alice).is_empty());
        assert_eq!(topic(&a, ALICE, Op::Describe, "x"), Denied);
        assert_eq!(
            a.authorize(ALICE, HOST, Op::Read, ResourceType::Group, "g"),
            Denied
        );
        assert_eq!(topic(&a, BOB, Op::Write, "order"), Allowed);
        assert!(a.remove_matching(&alice).is_empty());
        assert_eq!(a.remove_matching(&AclBindingFilter::any()).len(), 2);
        assert!(a.is_empty());
        // With nothing left, the default applies again.
        a.allow_everyone_if_no_acl_found = true;
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Allowed);
    }

    #[test]
    fn add_is_all_or_nothing() {
        let mut a = Authorizer::new(HashSet::new(), false);
        let good = allow_topic("t", Literal, ALICE, Op::Read);
        let bad = allow_topic("t", Literal, "alice", Op::Read);
        assert!(a.add(vec![good, bad]).is_err());
        assert!(a.is_empty());
    }

    fn validation_error(mutate: impl FnOnce(&mut AclBinding)) -> String {
        let mut b = allow_topic("t", Literal, ALICE, Op::Read);
        mutate(&mut b);
        b.validate().expect_err("invalid").to_string()
    }

    #[test]
    fn validation_errors_carry_kafka_texts() {
        assert_eq!(
            allow_topic("t", Literal, ALICE, Op::Read).validate(),
            Ok(())
        );
        assert_eq!(
            validation_error(|b| b.resource_type = ResourceType::Cluster),
            "The only valid name for the CLUSTER resource is kafka-cluster"
        );
        assert_eq!(
            validation_error(|b| b.name.clear()),
            "Invalid empty resource name"
        );
        assert_eq!(
            validation_error(|b| b.resource_type = ResourceType::Any),
            "Invalid resourceType ANY"
        );
        assert_eq!(
            validation_error(|b| b.pattern_type = PatternType::Match),
            "Invalid patternType MATCH"
        );
        assert_eq!(
            validation_error(|b| b.operation = Op::Any),
            "Invalid operation ANY"
        );
        assert_eq!(
            validation_error(|b| b.permission = AclPermissionType::Unknown),
            "Invalid permissionType UNKNOWN"
        );
        assert_eq!(
            validation_error(|b| b.principal = "alice".into()),
            "Could not parse principal from `alice` (no colon is present separating the \
             principal type from the principal name)"
        );
        assert!(
            validation_error(|b| b.host = "h".repeat(ACL_STRING_BYTES_MAX + 1)).contains("host")
        );
        let mut cluster = allow_topic(CLUSTER_RESOURCE_NAME, Literal, ALICE, Op::Alter);
        cluster.resource_type = ResourceType::Cluster;
        assert_eq!(cluster.validate(), Ok(()));
    }

    #[test]
    fn encode_decode_round_trip_and_golden() {
        let b = acl(
            ResourceType::Topic,
            "t",
            Prefixed,
            "User:a",
            "*",
            Op::Write,
            AclPermissionType::Deny,
        );
        let bytes = b.encode().expect("valid");
        assert_eq!(
            bytes,
            [1, 2, 4, 4, 2, 0, 1, b't', 0, 6, b'U', b's', b'e', b'r', b':', b'a', 0, 1, b'*']
        );
        assert_eq!(AclBinding::decode(&bytes), Ok(b.clone()));
        for len in 0..bytes.len() {
            assert!(
                matches!(
                    AclBinding::decode(&bytes[..len]),
                    Err(AclDecodeError::Truncated { .. })
                ),
                "prefix {len}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            AclBinding::decode(&longer),
            Err(AclDecodeError::TrailingBytes { remaining: 1, .. })
        ));
        let mut version = bytes.clone();
        version[0] = 2;
        assert_eq!(
            AclBinding::decode(&version),
            Err(AclDecodeError::UnsupportedVersion { version: 2 })
        );
        let mut code = bytes.clone();
        code[3] = 15;
        assert_eq!(
            AclBinding::decode(&code),
            Err(AclDecodeError::UnknownCode {
                field: "operation",
                code: 15
            })
        );
        let mut any = bytes.clone();
        any[3] = 1;
        assert_eq!(
            AclBinding::decode(&any),
            Err(AclDecodeError::Invalid(AclError::InvalidOperation(Op::Any)))
        );
        let mut utf8 = bytes.clone();
        utf8[7] = 0xff;
        assert_eq!(
            AclBinding::decode(&utf8),
            Err(AclDecodeError::InvalidUtf8 { field: "name" })
        );
        let mut invalid = b.clone();
        invalid.principal = "nobody".into();
        assert!(invalid.encode().is_err());
    }

    /// The rules written the plain way, over a flat list: the index must agree with it.
    fn reference_authorize(
        bindings: &[AclBinding],
        default_allow: bool,
        principal: &str,
        host: &str,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        let applying: Vec<&AclBinding> = bindings
            .iter()
            .filter(|b| b.resource_type == resource_type)
            .filter(|b| match b.pattern_type {
                Literal => b.name == name || b.name == WILDCARD,
                Prefixed => name.starts_with(&b.name),
                _ => false,
            })
            .collect();
        let matching = |permission| {
            applying.iter().any(|b| {
                b.permission == permission
                    && (b.principal == principal || b.principal == WILDCARD_PRINCIPAL)
                    && (b.host == host || b.host == WILDCARD)
                    && if permission == AclPermissionType::Allow {
                        b.operation.allow_implies(op)
                    } else {
                        b.operation.deny_implies(op)
                    }
            })
        };
        match (
            matching(AclPermissionType::Deny),
            matching(AclPermissionType::Allow),
            applying.is_empty(),
        ) {
            (true, _, _) => Denied,
            (false, true, _) => Allowed,
            (false, false, true) if default_allow => Allowed,
            _ => Denied,
        }
    }

    /// Few letters, so random ACLs often share prefixes with each other and with the names
    /// asked about; `é` puts a two-byte character where the prefix walk cuts names.
    fn arb_acl_name() -> impl Strategy<Value = String> {
        prop_oneof![8 => "[ab]{1,3}", 1 => Just(WILDCARD.to_owned()), 1 => "[aé]{1,2}"]
    }

    fn arb_binding() -> impl Strategy<Value = AclBinding> {
        (
            prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
            arb_acl_name(),
            prop::sample::select(vec![Literal, Prefixed]),
            prop::sample::select(vec![ALICE, BOB, WILDCARD_PRINCIPAL]),
            prop::sample::select(vec![HOST, OTHER_HOST, WILDCARD]),
            prop::sample::select(AclOperation::VALUES[2..].to_vec()),
            prop::sample::select(vec![AclPermissionType::Allow, AclPermissionType::Deny]),
        )
            .prop_map(
                |(resource_type, name, pattern_type, principal, host, operation, permission)| {
                    acl(
                        resource_type,
                        &name,
                        pattern_type,
                        principal,
                        host,
                        operation,
                        permission,
                    )
                },
            )
    }

    proptest! {
        #[test]
        fn decode_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = AclBinding::decode(&bytes);
        }

        #[test]
        fn decode_mutated_record_never_panics(
            binding in arb_binding(),
            position in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut bytes = binding.encode().expect("valid");
            let at = position.index(bytes.len());
            bytes[at] = byte;
            if let Ok(decoded) = AclBinding::decode(&bytes) {
                prop_assert_eq!(decoded.validate(), Ok(()));
            }
        }

        #[test]
        fn encode_decode_round_trips(binding in arb_binding()) {
            let bytes = binding.encode().expect("valid");
            prop_assert_eq!(AclBinding::decode(&bytes), Ok(binding));
        }

        #[test]
        fn index_agrees_with_reference(
            bindings in prop::collection::vec(arb_binding(), 0..24),
            default_allow in any::<bool>(),
            queries in prop::collection::vec(
                (
                    prop::sample::select(vec![ALICE, BOB, "User:carol"]),
                    prop::sample::select(vec![HOST, OTHER_HOST]),
                    prop::sample::select(AclOperation::VALUES[2..].to_vec()),
                    prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
                    prop_oneof![4 => "[ab]{0,4}", 1 => "[aé*]{0,3}"],
                ),
                1..16,
            ),
        ) {
            let mut a = Authorizer::new(HashSet::new(), default_allow);
            a.add(bindings.clone()).expect("valid");
            for (principal, host, op, resource_type, name) in queries {
                prop_assert_eq!(
                    a.authorize(principal, host, op, resource_type, &name),
                    reference_authorize(&bindings, default_allow, principal, host, op, resource_type, &name),
                    "{} {} {} {} {}", principal, host, op, resource_type, name
                );
            }
        }

        #[test]
        fn describe_and_remove_agree_with_filter(
            bindings in prop::collection::vec(arb_binding(), 0..24),
            probe in arb_binding(),
            pattern in prop::sample::select(vec![PatternType::Any, PatternType::Match, Literal, Prefixed]),
        ) {
            let mut a = Authorizer::new(HashSet::new(), false);
            a.add(bindings.clone()).expect("valid");
            let filter = AclBindingFilter {
                resource_type: probe.resource_type,
                name: Some(probe.name.clone()),
                pattern_type: pattern,
                principal: None,
                ..AclBindingFilter::any()
            };
            let mut expected: Vec<AclBinding> = bindings.iter().filter(|b| filter.matches(b)).cloned().collect();
            expected.sort();
            expected.dedup();
            prop_assert_eq!(a.describe(&filter), expected.clone());
            let before = a.len();
            prop_assert_eq!(a.remove_matching(&filter), expected.clone());
            prop_assert_eq!(a.len(), before - expected.len());
            prop_assert!(a.describe(&filter).is_empty());
        }
    }
}
