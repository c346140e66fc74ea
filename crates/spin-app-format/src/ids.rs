//! Ids of components, triggers and variables: Spin's id rule (`spin_serde::id`) and the
//! limits on top of it that keep an id safe as a file name and in a log line. Both the
//! manifest and the locked app check their ids here.

use anyhow::anyhow;

use crate::untrusted::{is_hidden_format, shown};

/// Longest component id accepted, in bytes: ids name staging directories and appear in
/// every log line of the app.
pub const MAX_ID_BYTES: usize = 200;
/// The component id rule, for errors.
pub const COMPONENT_ID_RULE: &str = "a component id is kebab-case: words of ASCII letters and \
    digits, each starting with a letter and all lower or all UPPER case, joined by `-` (as \
    spin.toml requires; a component Spin clones for a trigger is `<id>-for-<trigger id>`)";

/// Checks a component id as Spin's manifest does (`KebabId`: `-`-separated words of ASCII
/// letters and digits, each starting with a letter, all lower or all upper case), at most
/// [`MAX_ID_BYTES`] long. The id Spin's loader gives a component it clones for a trigger
/// with middleware, `<id>-for-<trigger id>`, is accepted too when the trigger id is made of
/// ASCII letters, digits, `-` and `_` (Spin does not restrict trigger ids; these are the
/// ones that are safe as a file name). Such ids name files and directories, so nothing
/// else is: no `/`, no `.`, no control character. Says what is wrong.
pub fn check_component_id(id: &str) -> Result<(), String> {
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "it is {} bytes long, more than the limit of {MAX_ID_BYTES}",
            id.len()
        ));
    }
    let kebab = validate_id(id, '-', false);
    if kebab.is_ok() {
        return Ok(());
    }
    if let Some((base, trigger)) = id.split_once("-for-") {
        if validate_id(base, '-', false).is_ok()
            && !trigger.is_empty()
            && trigger
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Ok(());
        }
    }
    kebab
}

/// [`check_component_id`] as an error naming `key`, the id and the rule.
pub fn component_id_error(key: &str, id: &str) -> Option<anyhow::Error> {
    check_component_id(id).err().map(|e| {
        anyhow!(
            "key `{key}`: component id `{}` is invalid: {e}; {COMPONENT_ID_RULE}",
            shown(id)
        )
    })
}

/// Checks a trigger id: Spin accepts any string; ids are shown in every log line about
/// their trigger and may name a component clone, so here they are at most
/// [`MAX_ID_BYTES`] long and hold no control or invisible formatting character.
pub fn check_trigger_id(id: &str) -> Result<(), String> {
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "it is {} bytes long, more than the limit of {MAX_ID_BYTES}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control() || is_hidden_format(*c)) {
        return Err(format!(
            "it contains the control or formatting character {}",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// Spin's id rule (`spin_serde::id`): words separated by `delim`, each starting with an
/// ASCII letter and all lower or all upper case alphanumerics (`lower_only`: lower case).
pub fn validate_id(id: &str, delim: char, lower_only: bool) -> Result<(), String> {
    if id.is_empty() {
        return Err("empty".into());
    }
    let wrong = if delim == '-' { '_' } else { '-' };
    if id.contains(wrong) {
        return Err(format!(
            "words must be separated with {delim:?}, not {wrong:?}"
        ));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "it is {} bytes long, more than the limit of {}",
            id.len(),
            MAX_ID_BYTES
        ));
    }
    for word in id.split(delim) {
        let mut chars = word.chars();
        let Some(first) = chars.next() else {
            return Err(format!("{delim:?}-separated words must not be empty"));
        };
        if !first.is_ascii_alphabetic() {
            return Err(format!(
                "{delim:?}-separated words must start with an ASCII letter; got {first:?}"
            ));
        }
        let upper = first.is_ascii_uppercase();
        for ch in chars {
            if ch.is_ascii_digit() {
                continue;
            }
            if !ch.is_ascii_alphanumeric() {
                return Err(format!(
                    "{delim:?}-separated words may only contain alphanumeric ASCII; got {ch:?}"
                ));
            }
            if ch.is_ascii_uppercase() != upper {
                return Err(format!(
                    "{delim:?}-separated words must be all lowercase or all UPPERCASE; got \"{}\"",
                    shown(word)
                ));
            }
        }
        if lower_only && upper {
            return Err(format!(
                "lower-case identifiers must be all lowercase; got \"{}\"",
                shown(id)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_ids_follow_spin_and_never_name_a_path() {
        for ok in [
            "hello",
            "hello-wild",
            "HELLO-wild2",
            "six-lights-for-six-lights-http-trigger",
            "six-lights-for-http-trigger1",
            "c-for-my_trigger",
        ] {
            check_component_id(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let long = "a".repeat(MAX_ID_BYTES + 1);
        for bad in [
            "x/../../data",
            "..",
            "a.b",
            "",
            "a/b",
            "/abs",
            "a\nb",
            "x-for-../..",
            "x-for-a/b",
            "1abc",
            long.as_str(),
        ] {
            assert!(check_component_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trigger_ids_are_short_and_visible() {
        check_trigger_id("my trigger_1").unwrap();
        assert!(check_trigger_id("a\nFORGED").is_err());
        assert!(check_trigger_id("rtl\u{202e}").is_err());
        assert!(check_trigger_id(&"t".repeat(MAX_ID_BYTES + 1)).is_err());
    }
}
