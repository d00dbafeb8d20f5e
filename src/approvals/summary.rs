//! The one-line summary of an approval: readable on a card, read aloud by the voice model, written
//! to the audit trail — so it is one line, short, and has what looks like a secret taken out.

/// Longest summary, in bytes; the rest is cut and marked `…`.
pub const MAX_SUMMARY_LEN: usize = 240;

/// Shortest run of token-like characters treated as a secret when it mixes letters and digits.
const SECRET_RUN_LEN: usize = 24;
/// Variable or option names whose value is a secret.
const SECRET_NAMES: [&str; 7] = ["key", "token", "secret", "pass", "auth", "cred", "bearer"];

/// `text` on one line (control characters and runs of spaces become one space), at most
/// [`MAX_SUMMARY_LEN`] bytes.
pub fn one_line(text: &str) -> String {
    let mut line = String::with_capacity(text.len().min(MAX_SUMMARY_LEN + 4));
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()).filter(|word| !word.is_empty()) {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        if line.len() > MAX_SUMMARY_LEN {
            break;
        }
    }
    clip(&line, MAX_SUMMARY_LEN)
}

/// `text` cut to at most `max` bytes on a character boundary, `…` added when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", crate::text::prefix(text, max))
}

/// `text` with what looks like a secret replaced by `…`: the value of `NAME=value` or
/// `--name value`/`--name=value` when the name speaks of a key, token, password or credential,
/// what follows `Bearer`/`Basic`, and any long run of letters and digits (an API key, a hash).
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut hide_next = false;
    for (index, piece) in text.split_inclusive(char::is_whitespace).enumerate() {
        let word = piece.trim_end_matches(char::is_whitespace);
        let space = &piece[word.len()..];
        if index > 0 && hide_next && !word.is_empty() {
            out.push('…');
            out.push_str(space);
            hide_next = false;
            continue;
        }
        hide_next = false;
        out.push_str(&redact_word(word));
        out.push_str(space);
        let bare = word.trim_matches(|c: char| matches!(c, '"' | '\'' | ':'));
        let lower = bare.to_ascii_lowercase();
        if lower == "bearer" || lower == "basic" || (bare.starts_with('-') && !bare.contains('=') && names_secret(bare))
        {
            hide_next = true;
        }
    }
    out
}

fn redact_word(word: &str) -> String {
    if let Some((name, value)) = word.split_once('=') {
        if !value.is_empty() && names_secret(name) {
            return format!("{name}=…");
        }
    }
    let mut out = String::with_capacity(word.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let letters = run.chars().any(|c| c.is_ascii_alphabetic());
        let digits = run.chars().any(|c| c.is_ascii_digit());
        if run.len() >= SECRET_RUN_LEN && letters && digits {
            out.push('…');
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in word.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/' | '=') {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

fn names_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|secret| lower.contains(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_one_short_line() {
        assert_eq!(one_line("npm test\n\t--  watch\r\n"), "npm test -- watch");
        let long = one_line(&"word ".repeat(500));
        assert!(long.len() <= MAX_SUMMARY_LEN + '…'.len_utf8() && long.ends_with('…'), "{long}");
        assert_eq!(one_line(&"é".repeat(400)).chars().last(), Some('…'));
        assert!(!one_line("a\u{1b}[31mred\u{7}").contains('\u{1b}'));
    }

    #[test]
    fn what_looks_like_a_secret_is_taken_out() {
        let key = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a";
        assert_eq!(redact_secrets(&format!("API_KEY={key} npm test")), "API_KEY=… npm test");
        assert_eq!(
            redact_secrets("curl -H 'Authorization: Bearer abc' https://x.example"),
            "curl -H 'Authorization: Bearer … https://x.example"
        );
        assert_eq!(redact_secrets("mysql --password hunter2 db"), "mysql --password … db");
        assert_eq!(redact_secrets("login --token=hunter2"), "login --token=…");
        assert_eq!(redact_secrets(&format!("echo {key}")), "echo …");
        let hex = "0123456789abcdef0123456789abcdef";
        assert_eq!(redact_secrets(&format!("voxa pair {hex}")), "voxa pair …");
        // Ordinary commands are left as they are.
        for plain in ["git status -s", "cargo test --test it approvals", "ls -la src/approvals", "npm run build"] {
            assert_eq!(redact_secrets(plain), plain);
        }
    }
}
