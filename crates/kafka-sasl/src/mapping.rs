//! Principal names from client certificates, with rules in the syntax of Kafka's
//! `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[LU]` entries separated by
//! commas, and `DEFAULT` (the whole distinguished name). The gateway's default is the CN.

use crate::error::SaslError;

/// Maps an RFC 2253 distinguished name (`CN=alice,OU=eng,O=Example`) to a principal name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    _private: (),
}

impl PrincipalMapper {
    /// The gateway's default: the first CN, or the whole name when there is none.
    pub fn common_name() -> PrincipalMapper {
        PrincipalMapper { _private: () }
    }

    /// Rules as Kafka writes them.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, SaslError> {
        let _ = rules;
        Err(SaslError::InvalidMappingRule {
            rule: rules.into(),
            reason: "not implemented".into(),
        })
    }

    /// The principal name for `dn`, `None` when no rule matches.
    pub fn map(&self, dn: &str) -> Option<String> {
        let _ = dn;
        None
    }
}
