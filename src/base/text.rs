//! What text a third party wrote (a child's standard error) may show in a log line: nothing a
//! terminal or a log viewer acts on.

/// Unicode's format characters that hide text or change its order on screen (category `Cf`:
/// bidirectional overrides and isolates, zero-width characters, the byte order mark, the soft
/// hyphen, interlinear annotations).
pub fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// A control or format character: never shown as it is.
pub fn is_unseen(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// `text` with its control characters (a carriage return that would overwrite the log line's
/// start on a terminal, an escape sequence) and its format characters (a right-to-left override
/// that shows `gnp.exe` as `exe.png`) written as escapes; tabs kept.
pub fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match is_unseen(c) && c != '\t' {
            true => shown.extend(c.escape_default()),
            false => shown.push(c),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_and_invisible_characters_are_unseen_and_text_is_not() {
        for c in [
            '\u{202E}', '\u{2066}', '\u{200B}', '\u{FEFF}', '\u{1B}', '\n',
        ] {
            assert!(is_unseen(c), "{c:?}");
        }
        assert!("exe.png, é, 日本, עברית".chars().all(|c| !is_unseen(c)));
    }
}
