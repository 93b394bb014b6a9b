//! Kafka's JAAS config value, as written in `sasl.jaas.config` or
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`:
//!
//! ```text
//! org.apache.kafka.common.security.plain.PlainLoginModule required
//!     username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";
//! ```
//!
//! This module owns the parse (login module class, control flag, `key=value` options, the
//! closing `;`) and reading PLAIN's `user_NAME="password"` options. It follows the tokenizer
//! rules of Kafka's `JaasConfig`: whitespace is any byte up to the space, `;` and `=` stand
//! alone, values are words or strings in `"` or `'` with backslash escapes, and `/` outside a
//! string starts a comment (`//` or `/` to the end of the line, `/* */` a block). It never loads
//! a class nor reads a file, and its errors and `Debug` never show an option's value.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The longest config value parsed; checked first. A PLAIN config lists every user, so this is
/// generous: about ten thousand users of 100 bytes each.
pub const JAAS_CONFIG_BYTES_MAX: usize = 1024 * 1024;

/// Kafka's PLAIN login module.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// Kafka's SCRAM login module.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
/// The option prefix PLAIN's server side reads users from: `user_alice="alice-secret"`.
pub const PLAIN_USER_PREFIX: &str = "user_";

/// A JAAS login module's control flag (matched case-insensitively, as Java does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlFlag {
    Required,
    Requisite,
    Sufficient,
    Optional,
}

impl ControlFlag {
    fn parse(word: &str) -> Option<ControlFlag> {
        match word.to_ascii_lowercase().as_str() {
            "required" => Some(ControlFlag::Required),
            "requisite" => Some(ControlFlag::Requisite),
            "sufficient" => Some(ControlFlag::Sufficient),
            "optional" => Some(ControlFlag::Optional),
            _ => None,
        }
    }
}

/// One login module entry of a JAAS config value.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasConfig {
    /// The Java class name, e.g. [`PLAIN_LOGIN_MODULE`].
    pub login_module: String,
    pub control_flag: ControlFlag,
    pub options: BTreeMap<String, String>,
}

/// Why a JAAS config value was refused. Messages follow Kafka's and name the offending key or
/// position, never an option's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JaasError {
    #[error("JAAS config is {size} bytes, over the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("Login module not specified in JAAS config")]
    NoLoginModule,
    #[error("JAAS config property contains {count} login modules, should be 1 module")]
    ModuleCount { count: usize },
    #[error("Login module control flag not specified in JAAS config for login module '{module}'")]
    ControlFlagMissing { module: String },
    #[error("Invalid login module control flag '{flag}' in JAAS config (expected required, requisite, sufficient or optional)")]
    InvalidControlFlag { flag: String },
    #[error("Value not specified for key '{key}' in JAAS config")]
    ValueMissing { key: String },
    #[error("JAAS config entry for login module '{module}' not terminated by semi-colon")]
    NotTerminated { module: String },
    #[error("JAAS config expected {expected} at byte {position} but found {found}")]
    Unexpected {
        expected: &'static str,
        found: String,
        position: usize,
    },
    #[error("JAAS config option '{key}' is given twice")]
    DuplicateOption { key: String },
    #[error(
        "JAAS config has a quoted value opened at byte {position} and not closed on the same line"
    )]
    UnterminatedQuote { position: usize },
    #[error("JAAS config has a /* comment opened at byte {position} and never closed")]
    UnterminatedComment { position: usize },
}

impl JaasConfig {
    /// Parses a `sasl.jaas.config` value, which Kafka requires to hold exactly one login module.
    pub fn parse(text: &str) -> Result<JaasConfig, JaasError> {
        let mut entries = parse_entries(text)?;
        if entries.len() != 1 {
            return Err(JaasError::ModuleCount {
                count: entries.len(),
            });
        }
        Ok(entries.remove(0))
    }

    /// The value of one option.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// The `username` option: the identity this side logs in as.
    pub fn username(&self) -> Option<&str> {
        self.option("username")
    }

    /// The `password` option.
    pub fn password(&self) -> Option<&str> {
        self.option("password")
    }
}

impl fmt::Debug for JaasConfig {
    // Passwords stay out of logs: `password` and every `user_NAME` value are redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options: BTreeMap<&str, &str> = self
            .options
            .iter()
            .map(|(k, v)| {
                let secret = k == "password" || k.starts_with(PLAIN_USER_PREFIX);
                (k.as_str(), if secret { "<redacted>" } else { v.as_str() })
            })
            .collect();
        f.debug_struct("JaasConfig")
            .field("login_module", &self.login_module)
            .field("control_flag", &self.control_flag)
            .field("options", &options)
            .finish()
    }
}

/// PLAIN's users and passwords: every `user_NAME="password"` option, keyed by NAME. An option
/// named just `user_` names nobody and is skipped.
pub fn plain_users(config: &JaasConfig) -> HashMap<String, String> {
    config
        .options
        .iter()
        .filter_map(|(key, value)| {
            let name = key.strip_prefix(PLAIN_USER_PREFIX)?;
            (!name.is_empty()).then(|| (name.to_string(), value.clone()))
        })
        .collect()
}

/// Parses every login module entry in a JAAS config value (a JAAS file's section body may hold
/// several; `sasl.jaas.config` must hold one, see [`JaasConfig::parse`]).
pub fn parse_entries(text: &str) -> Result<Vec<JaasConfig>, JaasError> {
    if text.len() > JAAS_CONFIG_BYTES_MAX {
        return Err(JaasError::TooLarge {
            size: text.len(),
            max: JAAS_CONFIG_BYTES_MAX,
        });
    }
    let mut lexer = Lexer { text, position: 0 };
    let mut entries = Vec::new();
    while let Some(token) = lexer.next_token()? {
        entries.push(parse_entry(&mut lexer, token)?);
    }
    if entries.is_empty() {
        return Err(JaasError::NoLoginModule);
    }
    Ok(entries)
}

fn parse_entry(lexer: &mut Lexer<'_>, first: Spanned) -> Result<JaasConfig, JaasError> {
    let login_module = match first.token {
        Token::Word(word) => word,
        other => {
            return Err(unexpected(
                "a login module class name",
                &other,
                first.position,
            ))
        }
    };
    let control_flag = match lexer.next_token()? {
        None => {
            return Err(JaasError::ControlFlagMissing {
                module: login_module,
            })
        }
        Some(Spanned {
            token: Token::Word(word),
            ..
        }) => ControlFlag::parse(&word).ok_or(JaasError::InvalidControlFlag { flag: word })?,
        Some(other) => return Err(unexpected("a control flag", &other.token, other.position)),
    };
    let mut options = BTreeMap::new();
    loop {
        let key = match lexer.next_token()? {
            None => {
                return Err(JaasError::NotTerminated {
                    module: login_module,
                })
            }
            Some(Spanned {
                token: Token::Semicolon,
                ..
            }) => break,
            Some(Spanned {
                token: Token::Word(key) | Token::Quoted(key),
                ..
            }) => key,
            Some(other) => {
                return Err(unexpected(
                    "an option name or ';'",
                    &other.token,
                    other.position,
                ))
            }
        };
        let equals = lexer.next_token()?;
        let value = match (equals, lexer.next_token()?) {
            (
                Some(Spanned {
                    token: Token::Equals,
                    ..
                }),
                Some(Spanned {
                    token: Token::Word(value) | Token::Quoted(value),
                    ..
                }),
            ) => value,
            _ => return Err(JaasError::ValueMissing { key }),
        };
        if options.contains_key(&key) {
            return Err(JaasError::DuplicateOption { key });
        }
        options.insert(key, value);
    }
    Ok(JaasConfig {
        login_module,
        control_flag,
        options,
    })
}

fn unexpected(expected: &'static str, found: &Token, position: usize) -> JaasError {
    let found = match found {
        Token::Word(word) => format!("'{word}'"),
        Token::Quoted(_) => "a quoted value".to_string(),
        Token::Semicolon => "';'".to_string(),
        Token::Equals => "'='".to_string(),
    };
    JaasError::Unexpected {
        expected,
        found,
        position,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Semicolon,
    Equals,
}

struct Spanned {
    token: Token,
    position: usize,
}

struct Lexer<'a> {
    text: &'a str,
    /// Byte position of the next unread character.
    position: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text.get(self.position..)?.chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.position += c.len_utf8();
        Some(c)
    }

    fn next_token(&mut self) -> Result<Option<Spanned>, JaasError> {
        self.skip_blanks_and_comments()?;
        let position = self.position;
        let Some(c) = self.bump() else {
            return Ok(None);
        };
        let token = match c {
            ';' => Token::Semicolon,
            '=' => Token::Equals,
            '"' | '\'' => Token::Quoted(self.quoted(c, position)?),
            _ => {
                let mut word = String::from(c);
                while let Some(c) = self.peek() {
                    if is_word_char(c) {
                        word.push(c);
                        self.position += c.len_utf8();
                    } else {
                        break;
                    }
                }
                Token::Word(word)
            }
        };
        Ok(Some(Spanned { token, position }))
    }

    fn skip_blanks_and_comments(&mut self) -> Result<(), JaasError> {
        while let Some(c) = self.peek() {
            if is_blank(c) {
                self.position += 1;
            } else if c == '/' {
                let start = self.position;
                self.position += 1;
                if self.peek() == Some('*') {
                    let Some(end) = self.text[self.position + 1..].find("*/") else {
                        return Err(JaasError::UnterminatedComment { position: start });
                    };
                    self.position += 1 + end + 2;
                } else {
                    // `//` and a lone `/` both run to the end of the line.
                    while let Some(c) = self.peek() {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                        self.position += c.len_utf8();
                    }
                }
            } else {
                break;
            }
        }
        Ok(())
    }

    /// The rest of a string opened by `quote` at `start`, with Java's escapes undone: `\n`,
    /// `\t`, `\r`, `\b`, `\f`, `\a`, `\v`, up to three octal digits, and `\` before any other
    /// character standing for that character.
    fn quoted(&mut self, quote: char, start: usize) -> Result<String, JaasError> {
        let mut value = String::new();
        loop {
            let c = match self.bump() {
                None | Some('\n') | Some('\r') => {
                    return Err(JaasError::UnterminatedQuote { position: start })
                }
                Some(c) => c,
            };
            if c == quote {
                return Ok(value);
            }
            if c != '\\' {
                value.push(c);
                continue;
            }
            let escaped = match self.bump() {
                None | Some('\n') | Some('\r') => {
                    return Err(JaasError::UnterminatedQuote { position: start })
                }
                Some(e) => e,
            };
            let unescaped = match escaped {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'a' => '\u{7}',
                'v' => '\u{b}',
                '0'..='7' => self.octal(escaped),
                other => other,
            };
            value.push(unescaped);
        }
    }

    /// An octal escape whose first digit is `first`: at most three digits and at most 0o377,
    /// as Java's tokenizer reads it.
    fn octal(&mut self, first: char) -> char {
        let mut code = first.to_digit(8).unwrap_or(0);
        let max_digits = if first <= '3' { 3 } else { 2 };
        for _ in 1..max_digits {
            match self.peek().and_then(|c| c.to_digit(8)) {
                Some(d) => {
                    code = code * 8 + d;
                    self.position += 1;
                }
                None => break,
            }
        }
        char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
    }
}

/// Java's tokenizer takes every byte from 0 to the space as whitespace.
fn is_blank(c: char) -> bool {
    (c as u32) <= 0x20
}

fn is_word_char(c: char) -> bool {
    !is_blank(c) && !matches!(c, ';' | '=' | '"' | '\'' | '/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kafka_plain_example() {
        let text = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
            username="admin"
            password="admin-secret"
            user_admin="admin-secret"
            user_alice="alice-secret";"#;
        let config = JaasConfig::parse(text).unwrap();
        assert_eq!(config.login_module, PLAIN_LOGIN_MODULE);
        assert_eq!(config.control_flag, ControlFlag::Required);
        assert_eq!(config.username(), Some("admin"));
        assert_eq!(config.password(), Some("admin-secret"));
        assert_eq!(config.options.len(), 4);
        let users = plain_users(&config);
        assert_eq!(users.len(), 2);
        assert_eq!(users["admin"], "admin-secret");
        assert_eq!(users["alice"], "alice-secret");
        let debug = format!("{config:?}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(debug.contains("admin"), "{debug}");
    }

    #[test]
    fn kafka_scram_example() {
        let text = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";"#;
        let config = JaasConfig::parse(text).unwrap();
        assert_eq!(config.login_module, SCRAM_LOGIN_MODULE);
        assert_eq!(config.username(), Some("admin"));
        assert_eq!(config.password(), Some("admin-secret"));
        assert!(plain_users(&config).is_empty());
    }

    #[test]
    fn unquoted_values_flags_comments_and_escapes() {
        let text = "// leading comment\n\
            com.example.Module Optional /* block\n comment */ a=plain b='single' \
            c=\"q\\\"uo\\\\te\\n\\101\\x\" tokenauth=true e=\"with ; and = inside\" // tail\n;";
        let config = JaasConfig::parse(text).unwrap();
        assert_eq!(config.login_module, "com.example.Module");
        assert_eq!(config.control_flag, ControlFlag::Optional);
        assert_eq!(config.option("a"), Some("plain"));
        assert_eq!(config.option("b"), Some("single"));
        assert_eq!(config.option("c"), Some("q\"uo\\te\nAx"));
        assert_eq!(config.option("tokenauth"), Some("true"));
        assert_eq!(config.option("e"), Some("with ; and = inside"));
        for (flag, expected) in [
            ("REQUISITE", ControlFlag::Requisite),
            ("sufficient", ControlFlag::Sufficient),
            ("Required", ControlFlag::Required),
        ] {
            let config = JaasConfig::parse(&format!("M {flag};")).unwrap();
            assert_eq!(config.control_flag, expected);
            assert!(config.options.is_empty());
        }
    }

    #[test]
    fn several_entries_parse_but_sasl_jaas_config_wants_one() {
        let text = "A required x=1; B optional;";
        assert_eq!(parse_entries(text).unwrap().len(), 2);
        assert_eq!(
            JaasConfig::parse(text).unwrap_err(),
            JaasError::ModuleCount { count: 2 }
        );
    }

    #[test]
    fn bad_inputs_name_what_was_wrong() {
        let cases: Vec<(&str, JaasError)> = vec![
            ("", JaasError::NoLoginModule),
            ("   // only a comment", JaasError::NoLoginModule),
            (
                "Module",
                JaasError::ControlFlagMissing {
                    module: "Module".into(),
                },
            ),
            (
                "Module mandatory;",
                JaasError::InvalidControlFlag {
                    flag: "mandatory".into(),
                },
            ),
            (
                "Module required username=\"a\"",
                JaasError::NotTerminated {
                    module: "Module".into(),
                },
            ),
            (
                "Module required username;",
                JaasError::ValueMissing {
                    key: "username".into(),
                },
            ),
            (
                "Module required username=;",
                JaasError::ValueMissing {
                    key: "username".into(),
                },
            ),
            (
                "Module required username=",
                JaasError::ValueMissing {
                    key: "username".into(),
                },
            ),
            (
                "Module required a=1 a=2;",
                JaasError::DuplicateOption { key: "a".into() },
            ),
            (
                "Module required password=\"secret;",
                JaasError::UnterminatedQuote { position: 25 },
            ),
            (
                "Module required password=\"sec\nret\";",
                JaasError::UnterminatedQuote { position: 25 },
            ),
            (
                "Module required /* never closed",
                JaasError::UnterminatedComment { position: 16 },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(JaasConfig::parse(text).unwrap_err(), expected, "{text:?}");
        }
        let err = JaasConfig::parse("\"Quoted\" required;").unwrap_err();
        assert!(
            matches!(err, JaasError::Unexpected { position: 0, .. }),
            "{err:?}"
        );
        let err = JaasConfig::parse("Module required = x;").unwrap_err();
        assert_eq!(
            err.to_string(),
            "JAAS config expected an option name or ';' at byte 16 but found '='"
        );
        let err = JaasConfig::parse("Module required password=\"hunter2\" \"x\";")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        let long = "M required x=\"".to_string() + &"a".repeat(JAAS_CONFIG_BYTES_MAX) + "\";";
        assert!(matches!(
            JaasConfig::parse(&long).unwrap_err(),
            JaasError::TooLarge { .. }
        ));
    }

    #[test]
    fn plain_users_skips_a_nameless_user() {
        let config =
            JaasConfig::parse("M required user_=\"x\" user_bob=\"b\" userx=\"y\";").unwrap();
        let users = plain_users(&config);
        assert_eq!(users.len(), 1);
        assert_eq!(users["bob"], "b");
    }

    proptest! {
        #[test]
        fn random_text_never_panics(text in "\\PC{0,200}") {
            let _ = parse_entries(&text);
        }

        #[test]
        fn random_jaas_like_text_never_panics(text in "[a-z \"'=;/*\\\\\n0-7]{0,120}") {
            let _ = parse_entries(&text);
        }

        #[test]
        fn quoted_values_round_trip(value in "[^\"\\\\\n\r]{0,40}") {
            let text = format!("M required k=\"{value}\";");
            let config = JaasConfig::parse(&text).unwrap();
            prop_assert_eq!(config.option("k"), Some(value.as_str()));
        }
    }
}
