//! Principal names from client certificates, with rules in the syntax of Kafka's
//! `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[LU]` entries separated by
//! commas, and `DEFAULT` (the whole distinguished name). The gateway's default is the CN.
//!
//! Rules are tried in order and the first that applies gives the name. A `RULE` applies
//! when its pattern matches the whole distinguished name (RFC 2253 form, as the TLS layer
//! prints it); the name is then the replacement with `$1`, `$2`, ... standing for the
//! pattern's groups, lower- or upper-cased when the rule ends in `L` or `U`. A `/` inside a
//! pattern or replacement is written `\/`, and in a replacement a backslash takes the next
//! character literally (so `\$` is a dollar sign). `DEFAULT` always applies and keeps the
//! name as it is. A rule that produces an empty name does not apply. Patterns use the
//! `regex` crate's syntax, which covers what such rules use in practice (groups, classes,
//! lazy quantifiers) but has no look-around or back-references.
//!
//! Rules may be separated by commas or newlines, with whitespace around them.

use crate::error::SaslError;
use regex::Regex;

/// Longest rules text accepted, in bytes.
pub const MAX_RULES_BYTES: usize = 64 * 1024;
/// Largest compiled size of one rule's pattern, in bytes (the `regex` crate's size limit).
pub const MAX_PATTERN_SIZE: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
enum Rule {
    /// The whole distinguished name.
    Default,
    /// The first CN, or the whole name when there is none.
    CommonName,
    /// A pattern over the whole name and a replacement.
    Pattern {
        regex: Regex,
        replacement: String,
        case: Case,
    },
}

/// Maps an RFC 2253 distinguished name (`CN=alice,OU=eng,O=Example`) to a principal name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    /// The gateway's default: the first CN, or the whole name when there is none.
    pub fn common_name() -> PrincipalMapper {
        PrincipalMapper {
            rules: vec![Rule::CommonName],
        }
    }

    /// Rules as Kafka writes them.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, SaslError> {
        let invalid = |rule: &str, reason: &str| SaslError::InvalidMappingRule {
            rule: rule.to_string(),
            reason: reason.to_string(),
        };
        if rules.len() > MAX_RULES_BYTES {
            return Err(invalid(
                "",
                &format!("the rules are longer than {MAX_RULES_BYTES} bytes"),
            ));
        }
        let mut parsed = Vec::new();
        let mut rest = rules.trim_start();
        while !rest.is_empty() {
            let (rule, after) = if let Some(after) = rest.strip_prefix("DEFAULT") {
                (Rule::Default, after)
            } else if let Some(body) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(body)
                    .ok_or_else(|| invalid(rest, "expected RULE:pattern/replacement/"))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| invalid(rest, "expected RULE:pattern/replacement/"))?;
                let (case, after) = match after.as_bytes().first() {
                    Some(b'L') => (Case::Lower, &after[1..]),
                    Some(b'U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                let pattern = pattern.replace("\\/", "/");
                let regex = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
                    .size_limit(MAX_PATTERN_SIZE)
                    .build()
                    .map_err(|e| invalid(&pattern, &e.to_string()))?;
                (
                    Rule::Pattern {
                        regex,
                        replacement: replacement.to_string(),
                        case,
                    },
                    after,
                )
            } else {
                return Err(invalid(rest, "expected DEFAULT or RULE:"));
            };
            parsed.push(rule);
            let after = after.trim_start_matches([' ', '\t', '\r']);
            rest = match after.chars().next() {
                None => after,
                Some(',' | '\n') => after[1..].trim_start(),
                Some(_) => return Err(invalid(after, "expected a comma between rules")),
            };
        }
        if parsed.is_empty() {
            return Err(invalid(rules, "no rules"));
        }
        Ok(PrincipalMapper { rules: parsed })
    }

    /// The principal name for `dn`, `None` when no rule matches.
    pub fn map(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| {
            let name = match rule {
                Rule::Default => dn.to_string(),
                Rule::CommonName => common_name_of(dn).unwrap_or_else(|| dn.to_string()),
                Rule::Pattern {
                    regex,
                    replacement,
                    case,
                } => {
                    let captures = regex.captures(dn)?;
                    let name = expand(&captures, replacement);
                    match case {
                        Case::Keep => name,
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    }
                }
            };
            (!name.is_empty()).then_some(name)
        })
    }
}

/// The text up to the first `/` not preceded by a backslash, and what follows that slash.
fn until_slash(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

/// The replacement with `$n` group references filled in; a backslash quotes the next
/// character. Digits after `$` are taken while they still name a group of the pattern.
fn expand(captures: &regex::Captures<'_>, replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut group = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    let next = group * 10 + d as usize;
                    if group > 0 && next >= captures.len() {
                        break;
                    }
                    group = next;
                    chars.next();
                }
                if let Some(m) = captures.get(group) {
                    out.push_str(m.as_str());
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The value of the first CN attribute of an RFC 2253 name, unescaped.
pub fn common_name_of(dn: &str) -> Option<String> {
    let mut start = 0;
    let mut escaped = false;
    let mut in_quotes = false;
    let bytes = dn.as_bytes();
    for i in 0..=bytes.len() {
        let b = bytes.get(i).copied();
        match b {
            _ if escaped => escaped = false,
            Some(b'\\') => escaped = true,
            Some(b'"') => in_quotes = !in_quotes,
            Some(b',' | b'+' | b';') | None if !in_quotes => {
                let attribute = &dn[start..i];
                if let Some((kind, value)) = attribute.split_once('=')
                    && (kind.trim().eq_ignore_ascii_case("CN")
                        || kind.trim() == "2.5.4.3"
                        || kind.trim().eq_ignore_ascii_case("OID.2.5.4.3"))
                {
                    return Some(unescape_value(value.trim()));
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

/// Undoes RFC 2253 value escapes (`\,`, `\+`, `\\`, `\XX` hex pairs, surrounding quotes).
fn unescape_value(value: &str) -> String {
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    let mut bytes = Vec::with_capacity(value.len());
    let raw = value.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(byte) => {
                    bytes.push(byte);
                    i += 3;
                }
                None => {
                    bytes.push(raw[i + 1]);
                    i += 2;
                }
            }
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str = "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown";
    const ADMIN: &str = "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown";

    fn kafka_example() -> PrincipalMapper {
        // The rule set Kafka's security documentation walks through.
        PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n\
             RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n\
             RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n\
             DEFAULT",
        )
        .expect("rules")
    }

    #[test]
    fn kafka_documented_examples() {
        let mapper = kafka_example();
        assert_eq!(mapper.map(SERVICE).as_deref(), Some("serviceuser"));
        assert_eq!(mapper.map(ADMIN).as_deref(), Some("adminuser@admin"));
        assert_eq!(
            mapper.map("O=Example,cn=Some.Host").as_deref(),
            Some("some.host"),
            "third rule, lower-cased"
        );
        assert_eq!(
            mapper.map("O=Example").as_deref(),
            Some("O=Example"),
            "DEFAULT"
        );
    }

    #[test]
    fn upper_case_and_no_match() {
        let mapper = PrincipalMapper::parse("RULE:^CN=([^,]*),.*$/$1/U").expect("rule");
        assert_eq!(mapper.map("CN=alice,O=x").as_deref(), Some("ALICE"));
        assert_eq!(mapper.map("OU=alice,O=x"), None);
        assert_eq!(
            mapper.map("xCN=alice,O=x"),
            None,
            "the pattern must match it all"
        );
    }

    #[test]
    fn escapes_and_references() {
        let mapper = PrincipalMapper::parse(r"RULE:^CN=(\w+)\/(\w+)$/$2\/$1\$/").expect("rule");
        assert_eq!(mapper.map("CN=a/b").as_deref(), Some("b/a$"));
        let mapper = PrincipalMapper::parse("RULE:^CN=(x)$/$10/").expect("rule");
        assert_eq!(
            mapper.map("CN=x").as_deref(),
            Some("x0"),
            "$10 with one group is $1 then 0"
        );
        let mapper = PrincipalMapper::parse("RULE:^CN=(.*)$//, DEFAULT").expect("rules");
        assert_eq!(
            mapper.map("CN=x").as_deref(),
            Some("CN=x"),
            "empty result does not apply"
        );
    }

    #[test]
    fn bad_rules() {
        for bad in [
            "",
            "   ",
            "RULE:abc",
            "RULE:abc/def",
            "RULE:(/x/",
            "DEFAULT DEFAULT",
            "RULE:a/b/X",
            "KERBEROS",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn common_name_default() {
        let mapper = PrincipalMapper::common_name();
        assert_eq!(
            mapper.map("CN=alice,OU=eng,O=Example").as_deref(),
            Some("alice")
        );
        assert_eq!(mapper.map("OU=eng,cn=bob").as_deref(), Some("bob"));
        assert_eq!(
            mapper.map(r"CN=Smith\, John,O=x").as_deref(),
            Some("Smith, John")
        );
        assert_eq!(mapper.map("CN=\"a,b\",O=x").as_deref(), Some("a,b"));
        assert_eq!(mapper.map(r"CN=caf\C3\A9").as_deref(), Some("caf\u{e9}"));
        assert_eq!(mapper.map("CN=a+UID=7,O=x").as_deref(), Some("a"));
        assert_eq!(mapper.map("O=Example").as_deref(), Some("O=Example"));
        assert_eq!(mapper.map("2.5.4.3=host,O=x").as_deref(), Some("host"));
    }
}
