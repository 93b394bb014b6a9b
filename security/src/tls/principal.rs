//! The Kafka principal of a TLS client: the subject of its certificate written as Java's
//! `X500Principal.getName()` writes it (RFC 2253), and `ssl.principal.mapping.rules` read and
//! applied as Kafka's `SslPrincipalMapper` does. Plain functions over bytes and strings; no I/O.

use std::fmt;

use regex::{Captures, Regex};
use x509_parser::der_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::TlsError;

/// The subject of a DER certificate in RFC 2253 form as Java's `X500Principal.getName()` writes
/// it: RDNs last-to-first joined by `,`, multi-valued RDNs joined by `+`, the keywords CN, C, L,
/// ST, O, OU, STREET, DC and UID, other attribute types as dotted OIDs with `#`-hex DER values.
pub fn subject_dn_rfc2253(certificate_der: &[u8]) -> Result<String, TlsError> {
    let (_, certificate) = X509Certificate::from_der(certificate_der)
        .map_err(|error| TlsError::PeerCertificate(error.to_string()))?;
    let mut dn = String::new();
    for (position, rdn) in certificate
        .subject()
        .iter()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .enumerate()
    {
        if position > 0 {
            dn.push(',');
        }
        for (index, attribute) in rdn.iter().enumerate() {
            if index > 0 {
                dn.push('+');
            }
            let oid = attribute.attr_type().to_id_string();
            match rfc2253_keyword(&oid) {
                Some(keyword) => {
                    dn.push_str(keyword);
                    dn.push('=');
                    match decode_directory_string(attribute.attr_value()) {
                        Some(text) => escape_rfc2253_value(&text, &mut dn),
                        None => push_hex_value(attribute.attr_value(), &mut dn)?,
                    }
                }
                None => {
                    dn.push_str(&oid);
                    dn.push('=');
                    push_hex_value(attribute.attr_value(), &mut dn)?;
                }
            }
        }
    }
    Ok(dn)
}

fn rfc2253_keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// The text of a value Java writes as a string: its content bytes read as UTF-8 (malformed
/// bytes become U+FFFD), whatever the string type, as `AVA.toRFC2253String` does; `None` for
/// the types Java writes as hex (NumericString, VisibleString, UniversalString, non-strings).
fn decode_directory_string(value: &Any<'_>) -> Option<String> {
    match value.tag() {
        Tag::PrintableString
        | Tag::TeletexString
        | Tag::Ia5String
        | Tag::GeneralString
        | Tag::BmpString
        | Tag::Utf8String => Some(String::from_utf8_lossy(value.data).into_owned()),
        _ => None,
    }
}

/// Escapes a value as Java's RFC 2253 writer does: `,=+<>#;"\` anywhere, NUL as `\00`,
/// leading and trailing spaces and carriage returns; every other character as it is.
fn escape_rfc2253_value(text: &str, out: &mut String) {
    let edge = |c: &char| *c == ' ' || *c == '\r';
    let count = text.chars().count();
    let leading = text.chars().take_while(edge).count();
    let trailing_from = count
        - text
            .chars()
            .rev()
            .take_while(edge)
            .count()
            .min(count - leading);
    for (index, c) in text.chars().enumerate() {
        if c == '\0' {
            out.push_str("\\00");
            continue;
        }
        if ",=+<>#;\"\\".contains(c) || index < leading || index >= trailing_from {
            out.push('\\');
        }
        out.push(c);
    }
}

fn push_hex_value(value: &Any<'_>, out: &mut String) -> Result<(), TlsError> {
    let der = value
        .to_der_vec()
        .map_err(|error| TlsError::PeerCertificate(format!("an attribute value: {error}")))?;
    out.push('#');
    for byte in der {
        out.push_str(&format!("{byte:02x}"));
    }
    Ok(())
}

/// `ssl.principal.mapping.rules` as Kafka's `SslPrincipalMapper` reads and applies them: a
/// comma-separated list of `DEFAULT` (the DN as it is) and `RULE:pattern/replacement/[LU]`
/// (if the pattern matches the whole DN, every match is replaced, then lower- or upper-cased).
/// The first rule that applies names the principal.
///
/// Patterns are Rust `regex` syntax, which is Java's for the usual rules; look-around and
/// back-references are refused at start-up. Replacements are Java's: `$n` and `${name}` groups,
/// `\` quotes the next character, a `$n` past the last group is literal text.
#[derive(Clone, Debug)]
pub struct PrincipalMapper {
    rules: Vec<MappingRule>,
}

#[derive(Clone, Debug)]
enum MappingRule {
    Default,
    Replace {
        /// The pattern anchored at both ends: Java's `Matcher.matches()`.
        whole: Regex,
        /// The pattern as written, for the replacing pass (Java's `replaceAll`).
        pattern: Regex,
        replacement: String,
        case: Case,
        /// As Kafka prints the rule: `RULE:pattern/replacement[/L|/U]`.
        written: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// One rule: `DEFAULT`, or `RULE:` pattern `/` replacement `/` optional `L` or `U`; `\` quotes
/// a character in the pattern and the replacement. The trailing lazy parts let the splitter
/// find a rule's end before the next comma; the parser then refuses leftovers.
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![MappingRule::Default],
        }
    }
}

impl PrincipalMapper {
    /// Parses `ssl.principal.mapping.rules`; empty rules between commas are skipped.
    pub fn from_rules(rules: &str) -> Result<Self, TlsError> {
        let parser = rule_regex(&format!(r"\A(?:{RULE_PATTERN})"))?;
        let mut parsed = Vec::new();
        for rule in split_rules(rules)? {
            let Some(captures) = parser.captures(&rule) else {
                return Err(TlsError::PrincipalMapping(format!("invalid rule: {rule}")));
            };
            let end = captures.get(0).map_or(0, |m| m.end());
            if end != rule.len() {
                return Err(TlsError::PrincipalMapping(format!(
                    "invalid rule: `{rule}`, unmatched substring: `{}`",
                    &rule[end..]
                )));
            }
            if captures.get(1).is_some() {
                parsed.push(MappingRule::Default);
            } else if let Some(pattern) = captures.get(2) {
                let replacement = captures.get(4).map_or("", |m| m.as_str());
                let case = match captures.get(6).map(|m| m.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                parsed.push(MappingRule::replace(pattern.as_str(), replacement, case)?);
            }
        }
        Ok(PrincipalMapper { rules: parsed })
    }

    /// True when the rules hold no rule at all (`""` or only commas): Kafka then maps no
    /// subject, so every client with a certificate fails.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The principal name (without `User:`) for a subject DN: the first rule that applies.
    pub fn map(&self, distinguished_name: &str) -> Result<String, TlsError> {
        for rule in &self.rules {
            if let Some(name) = rule.apply(distinguished_name) {
                return Ok(name);
            }
        }
        Err(TlsError::PrincipalMapping(format!(
            "no rule applies to the certificate subject \"{distinguished_name}\""
        )))
    }
}

/// The rules as Kafka prints them: `[RULE:^CN=(.*?),OU=.*$/$1/L, DEFAULT]`.
impl fmt::Display for PrincipalMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (index, rule) in self.rules.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            match rule {
                MappingRule::Default => f.write_str("DEFAULT")?,
                MappingRule::Replace { written, .. } => f.write_str(written)?,
            }
        }
        f.write_str("]")
    }
}

fn rule_regex(pattern: &str) -> Result<Regex, TlsError> {
    Regex::new(pattern).map_err(|error| {
        TlsError::PrincipalMapping(format!("the pattern `{pattern}` is not supported: {error}"))
    })
}

/// Splits the rules as Kafka's splitter regex does, Java's `find()` loop included.
fn split_rules(rules: &str) -> Result<Vec<String>, TlsError> {
    let splitter = rule_regex(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)"))?;
    let text = rules.trim();
    let mut split = Vec::new();
    let mut start = 0;
    while start <= text.len() {
        let Some(captures) = splitter.captures_at(text, start) else {
            break;
        };
        let Some(whole) = captures.get(0) else { break };
        split.push(captures.get(1).map_or("", |m| m.as_str()).to_owned());
        start = next_search_start(text, whole.start(), whole.end());
    }
    Ok(split)
}

/// Where Java's `find()` looks next: after the match, or one character on after an empty one.
fn next_search_start(text: &str, start: usize, end: usize) -> usize {
    if end > start {
        return end;
    }
    end + text[end..].chars().next().map_or(1, char::len_utf8)
}

impl MappingRule {
    fn replace(pattern: &str, replacement: &str, case: Case) -> Result<Self, TlsError> {
        let suffix = match case {
            Case::Keep => "",
            Case::Lower => "/L",
            Case::Upper => "/U",
        };
        let written = format!("RULE:{pattern}/{replacement}{suffix}");
        let whole = rule_regex(&format!(r"\A(?:{pattern})\z"))?;
        let pattern = rule_regex(pattern)?;
        let groups = pattern.captures_len() - 1;
        let replacement = escape_literal_back_references(replacement, groups);
        // Kafka finds a bad replacement only when a DN first matches; here it fails start-up.
        check_replacement(&replacement, &pattern)?;
        Ok(MappingRule::Replace {
            whole,
            pattern,
            replacement,
            case,
            written,
        })
    }

    fn apply(&self, distinguished_name: &str) -> Option<String> {
        let MappingRule::Replace {
            whole,
            pattern,
            replacement,
            case,
            ..
        } = self
        else {
            return Some(distinguished_name.to_owned());
        };
        if !whole.is_match(distinguished_name) {
            return None;
        }
        let replaced = java_replace_all(pattern, distinguished_name, replacement);
        Some(match case {
            Case::Keep => replaced,
            Case::Lower => replaced.to_lowercase(),
            Case::Upper => replaced.to_uppercase(),
        })
    }
}

/// Kafka (after Apache NiFi) makes `$n` literal when the pattern has fewer than `n` groups,
/// after trying `n` with its trailing digits dropped (`$12` is group 1 then `2` with one group).
/// Kafka leaves the replacement alone when the pattern has no group at all. A `$` already quoted
/// with `\` is left as it is (Kafka would quote it again and then fail on the group).
fn escape_literal_back_references(replacement: &str, groups: usize) -> String {
    if groups == 0 {
        return replacement.to_owned();
    }
    let bytes = replacement.as_bytes();
    let mut out = String::with_capacity(replacement.len() + 4);
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' && index + 1 < bytes.len() {
            // A quoted character goes through untouched, `\$` included.
            let next = replacement[index + 1..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
            out.push_str(&replacement[index..index + 1 + next]);
            index += 1 + next;
            continue;
        }
        if bytes[index] == b'$' {
            let digits = bytes[index + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 && bytes[index + 1] != b'0' {
                let number = &replacement[index + 1..index + 1 + digits];
                let mut reference = number.bytes().fold(0usize, |value, digit| {
                    value
                        .saturating_mul(10)
                        .saturating_add(usize::from(digit - b'0'))
                });
                while reference > groups && reference >= 10 {
                    reference /= 10;
                }
                if reference > groups {
                    out.push('\\');
                }
            }
        }
        let next = replacement[index..]
            .chars()
            .next()
            .map_or(1, char::len_utf8);
        out.push_str(&replacement[index..index + next]);
        index += next;
    }
    out
}

/// Refuses a replacement Java's `appendReplacement` would throw on: a trailing `\` or `$`, `$`
/// not followed by a digit or `{name}`, a group the pattern does not have.
fn check_replacement(replacement: &str, pattern: &Regex) -> Result<(), TlsError> {
    let groups = pattern.captures_len() - 1;
    let names: Vec<&str> = pattern.capture_names().flatten().collect();
    walk_replacement(replacement, groups, |piece| match piece {
        Piece::Group(_) => Ok(()),
        Piece::Named(name) if names.contains(&name) => Ok(()),
        Piece::Named(name) => Err(format!(
            "the replacement `{replacement}` names no group `{name}`"
        )),
        Piece::Text(_) => Ok(()),
    })
    .map_err(TlsError::PrincipalMapping)
}

fn java_replace_all(pattern: &Regex, text: &str, replacement: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut appended = 0;
    let mut start = 0;
    while start <= text.len() {
        let Some(captures) = pattern.captures_at(text, start) else {
            break;
        };
        let Some(whole) = captures.get(0) else { break };
        out.push_str(&text[appended..whole.start()]);
        expand(replacement, &captures, pattern.captures_len() - 1, &mut out);
        appended = whole.end();
        start = next_search_start(text, whole.start(), whole.end());
    }
    out.push_str(&text[appended..]);
    out
}

fn expand(replacement: &str, captures: &Captures<'_>, groups: usize, out: &mut String) {
    // The replacement was checked when the rule was parsed, so no error is left here.
    let _ = walk_replacement(replacement, groups, |piece| {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Group(index) => out.push_str(captures.get(index).map_or("", |m| m.as_str())),
            Piece::Named(name) => out.push_str(captures.name(name).map_or("", |m| m.as_str())),
        }
        Ok::<(), String>(())
    });
}

enum Piece<'a> {
    Text(&'a str),
    Group(usize),
    Named(&'a str),
}

/// Reads a replacement as Java's `Matcher.appendReplacement` does: `\c` is `c`, `${name}` a
/// named group, `$` then digits a group number taken as long as it stays a group.
fn walk_replacement<'a, E: From<String>>(
    replacement: &'a str,
    groups: usize,
    mut visit: impl FnMut(Piece<'a>) -> Result<(), E>,
) -> Result<(), E> {
    let mut rest = replacement;
    while let Some(c) = rest.chars().next() {
        match c {
            '\\' => {
                let Some(quoted) = rest[1..].chars().next() else {
                    return Err(E::from(format!(
                        "the replacement `{replacement}` ends with a lone `\\`"
                    )));
                };
                visit(Piece::Text(&rest[1..1 + quoted.len_utf8()]))?;
                rest = &rest[1 + quoted.len_utf8()..];
            }
            '$' => {
                let after = &rest[1..];
                if let Some(named) = after.strip_prefix('{') {
                    let Some(close) = named.find('}') else {
                        return Err(E::from(format!(
                            "the replacement `{replacement}` has a `${{` without `}}`"
                        )));
                    };
                    visit(Piece::Named(&named[..close]))?;
                    rest = &named[close + 1..];
                    continue;
                }
                let digits: Vec<usize> = after
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .map(|digit| usize::from(digit - b'0'))
                    .collect();
                let Some(&first) = digits.first() else {
                    return Err(E::from(format!(
                        "the replacement `{replacement}` has a `$` without a group number; \
                         write `\\$` for a dollar sign"
                    )));
                };
                if first > groups {
                    return Err(E::from(format!(
                        "the replacement `{replacement}` refers to group {first}, but the \
                         pattern has {groups}"
                    )));
                }
                let mut reference = first;
                let mut used = 1;
                for &digit in &digits[1..] {
                    let longer = reference * 10 + digit;
                    if longer > groups {
                        break;
                    }
                    reference = longer;
                    used += 1;
                }
                visit(Piece::Group(reference))?;
                rest = &after[used..];
            }
            _ => {
                let plain = rest.find(['\\', '$']).unwrap_or(rest.len());
                visit(Piece::Text(&rest[..plain]))?;
                rest = &rest[plain..];
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> String {
        match PrincipalMapper::from_rules(rules).and_then(|mapper| mapper.map(dn)) {
            Ok(name) => name,
            Err(error) => panic!("{rules} on {dn}: {error}"),
        }
    }

    /// The parsed rules as Kafka's `SslPrincipalMapper.toString()` lists them.
    fn parsed(rules: &str) -> String {
        match PrincipalMapper::from_rules(rules) {
            Ok(mapper) => mapper.to_string(),
            Err(error) => panic!("{rules}: {error}"),
        }
    }

    #[test]
    fn valid_rules_parse() {
        for rules in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        ] {
            assert!(PrincipalMapper::from_rules(rules).is_ok(), "{rules}");
        }
    }

    #[test]
    fn invalid_rules_are_refused() {
        for rules in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        ] {
            let error = PrincipalMapper::from_rules(rules).err();
            assert!(
                matches!(error, Some(TlsError::PrincipalMapping(ref message)) if message.contains("invalid rule")),
                "{rules}: {error:?}"
            );
        }
    }

    #[test]
    fn kafka_documented_mappings() {
        let rules = [
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
            "DEFAULT",
        ]
        .join(", ");
        assert_eq!(map(&rules, "CN=Duke,OU=ServiceUsers,O=Org,C=US"), "duke");
        assert_eq!(
            map(&rules, "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"),
            "duke@sme"
        );
        assert_eq!(map(&rules, "cn=duke,ou=sme,dc=mycp,dc=com"), "DUKE@SME");
        assert_eq!(
            map(&rules, "cN=duke,OU=JavaSoft,O=Sun Microsystems"),
            "DUKE"
        );
        assert_eq!(
            map(&rules, "OU=JavaSoft,O=Sun Microsystems,C=US"),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
        assert_eq!(
            map("DEFAULT", "CN=alice,OU=eng,O=acme"),
            "CN=alice,OU=eng,O=acme"
        );
        assert_eq!(
            map("RULE:^CN=(.*?),OU=.*$/$1/U", "CN=alice,OU=eng,O=acme"),
            "ALICE"
        );
    }

    #[test]
    fn comma_inside_a_value() {
        let rules = r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT";
        assert_eq!(
            map(rules, r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz"),
            r"Tkac\, Adam"
        );
    }

    #[test]
    fn no_matching_rule_is_an_error() {
        let mapper = PrincipalMapper::from_rules("RULE:^CN=(.*?),OU=eng$/$1/").ok();
        let result = mapper.map(|mapper| mapper.map("CN=bob,OU=ops"));
        assert!(
            matches!(result, Some(Err(TlsError::PrincipalMapping(ref m))) if m.contains("CN=bob,OU=ops"))
        );
        let empty = PrincipalMapper::from_rules("")
            .ok()
            .map(|mapper| mapper.map("CN=a"));
        assert!(matches!(empty, Some(Err(_))));
    }

    #[test]
    fn rules_split_as_kafka_does() {
        // Kafka's own cases, inputs and expected lists as its tests have them.
        for (expected, rules) in [
            ("[]", ""),
            ("[DEFAULT]", "DEFAULT"),
            ("[RULE:/]", "RULE://"),
            ("[RULE:/.*]", "RULE:/.*/"),
            ("[RULE:/.*/L]", "RULE:/.*/L"),
            ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
            ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
            (
                "[RULE:   /     , DEFAULT]",
                "  RULE:   /     / ,  DEFAULT  ",
            ),
            (
                "[RULE:  /     /U, DEFAULT]",
                "  RULE:  /     /U   ,DEFAULT  ",
            ),
            (
                "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
                "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            ),
            // Empty rules are ignored.
            ("[]", ",   , , ,      , , ,   "),
            ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
            (
                "[RULE: /   , DEFAULT]",
                ",  , RULE: /   /    ,,,   DEFAULT, ,   ",
            ),
            (
                "[RULE:   /  /U, DEFAULT]",
                "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,",
            ),
            // Escape sequences.
            (r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//"),
            (
                r"[RULE:\**\/+/*/L, RULE:\/*\**/**]",
                r"RULE:\**\/+/*/L,RULE:\/*\**/**/",
            ),
            // Rules that look like several rules.
            (
                r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
                r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
            ),
        ] {
            assert_eq!(parsed(rules), expected, "{rules}");
        }
    }

    #[test]
    fn replacement_references_follow_java() {
        // Past the last group a reference is literal text; trailing digits are dropped first.
        assert_eq!(map("RULE:^CN=(.*)$/$1@$4/", "CN=x"), "x@$4");
        assert_eq!(map("RULE:^CN=(.*)$/$12/", "CN=x"), "x2");
        assert_eq!(map(r"RULE:^CN=(.*)$/\$1-$1/", "CN=x"), "$1-x");
        assert_eq!(map("RULE:^CN=(?P<user>.*)$/${user}!/", "CN=x"), "x!");
        // A pattern without groups keeps `$1`, which Java refuses: so do we, at start-up.
        assert!(PrincipalMapper::from_rules("RULE:^CN=x$/$1/").is_err());
        assert!(PrincipalMapper::from_rules("RULE:^CN=(x)$/a$/").is_err());
        assert!(PrincipalMapper::from_rules("RULE:^CN=(x)$/${nope}/").is_err());
        // Every match of the pattern is replaced, as Java's replaceAll does.
        assert_eq!(map("RULE:[a-z]+/<$0>/", "abc"), "<abc>");
        assert_eq!(map("RULE:x*/-/", ""), "-");
    }

    #[test]
    fn lookaround_patterns_are_refused_clearly() {
        let error = PrincipalMapper::from_rules("RULE:^CN=(?=a)(.*)$/$1/").err();
        assert!(
            matches!(error, Some(TlsError::PrincipalMapping(ref m)) if m.contains("not supported")),
            "{error:?}"
        );
    }

    #[test]
    fn values_are_escaped_as_java_does() {
        let mut out = String::new();
        escape_rfc2253_value(" a,b+c=d#e;\"f\\<g> ", &mut out);
        assert_eq!(out, r#"\ a\,b\+c\=d\#e\;\"f\\\<g\>\ "#);
        let mut out = String::new();
        escape_rfc2253_value("tab\there\0", &mut out);
        assert_eq!(out, "tab\there\\00");
        let mut out = String::new();
        escape_rfc2253_value("  ", &mut out);
        assert_eq!(out, r"\ \ ");
        let mut out = String::new();
        escape_rfc2253_value("\r a\r", &mut out);
        assert_eq!(out, "\\\r\\ a\\\r");
        let mut out = String::new();
        escape_rfc2253_value("Zoë", &mut out);
        assert_eq!(out, "Zoë");
    }
}
