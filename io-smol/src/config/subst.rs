//! `${VAR}` substitution (spec 04 §3.4).

use std::fmt;

/// Why a template could not be resolved.
///
/// The `Display` text is the provider-facing wording of spec 05 §4; other
/// callers (MCP, telemetry) may match on the variants to word their own
/// messages. The error never contains a resolved value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubstError {
    /// `${NAME}` referenced a variable that is not set.
    Unset(String),
    /// `${` without a closing `}`.
    Unterminated,
}

impl fmt::Display for SubstError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubstError::Unset(name) => write!(
                f,
                "environment variable {name} referenced by provider config is not set"
            ),
            SubstError::Unterminated => f.write_str("unterminated ${...} token in provider config"),
        }
    }
}

impl std::error::Error for SubstError {}

/// Replaces every `${NAME}` in `template` with `get(NAME)`.
///
/// A `$` not followed by `{` is copied literally; `${` without a closing `}`
/// is [`SubstError::Unterminated`]; an unset variable is
/// [`SubstError::Unset`] (an empty-but-set one substitutes as empty).
/// Substituted values are not rescanned. Tokens are processed left to right
/// and the first error wins.
pub fn substitute(
    template: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<String, SubstError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find("${") {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 2..];
        let end = after.find('}').ok_or(SubstError::Unterminated)?;
        let name = &after[..end];
        match get(name) {
            Some(v) => out.push_str(&v),
            None => return Err(SubstError::Unset(name.to_string())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "B" => Some("beta".into()),
            "EMPTY" => Some(String::new()),
            "DOLLAR" => Some("${A}".into()),
            _ => None,
        }
    }

    #[test]
    fn replaces_tokens() {
        assert_eq!(substitute("plain", env).unwrap(), "plain");
        assert_eq!(substitute("", env).unwrap(), "");
        assert_eq!(substitute("${A}", env).unwrap(), "alpha");
        assert_eq!(
            substitute("Bearer ${A}_${B}", env).unwrap(),
            "Bearer alpha_beta"
        );
        assert_eq!(substitute("x${EMPTY}y", env).unwrap(), "xy");
        // Values are not rescanned.
        assert_eq!(substitute("${DOLLAR}", env).unwrap(), "${A}");
        // Non-ASCII around tokens.
        assert_eq!(substitute("é${A}ü", env).unwrap(), "éalphaü");
    }

    #[test]
    fn literal_dollars() {
        assert_eq!(substitute("$A", env).unwrap(), "$A");
        assert_eq!(substitute("cost $5", env).unwrap(), "cost $5");
        assert_eq!(substitute("$", env).unwrap(), "$");
        assert_eq!(substitute("$$${A}", env).unwrap(), "$$alpha");
        assert_eq!(substitute("a}b", env).unwrap(), "a}b");
    }

    #[test]
    fn errors() {
        let e = substitute("Bearer ${MISSING}", env).unwrap_err();
        assert_eq!(e, SubstError::Unset("MISSING".into()));
        assert_eq!(
            e.to_string(),
            "environment variable MISSING referenced by provider config is not set"
        );
        let e = substitute("Bearer ${A", env).unwrap_err();
        assert_eq!(e, SubstError::Unterminated);
        assert_eq!(
            e.to_string(),
            "unterminated ${...} token in provider config"
        );
        assert_eq!(
            substitute("${A}${", env).unwrap_err(),
            SubstError::Unterminated
        );
        // First error wins.
        assert_eq!(
            substitute("${X}${", env).unwrap_err(),
            SubstError::Unset("X".into())
        );
        assert_eq!(
            substitute("${}", env).unwrap_err(),
            SubstError::Unset(String::new())
        );
    }
}
