//! Python literals as the Edge provider stores them: a worker's `queues` is
//! `str(list)`, read back here as the provider reads it (`ast.literal_eval`).

/// The queues of a worker as the provider stores them: `str(list)` in Python,
/// `['default', 'gpu']`, read back as the provider does (`ast.literal_eval`),
/// escapes included: `['new\nline']` is the queue whose name holds a newline,
/// as `edge_job.queue` holds it. `None` for null, empty (`None` or `[]` in
/// Python: every queue). Text that is no list is kept whole, as one queue's name.
pub fn python_list(text: &str) -> Option<Vec<String>> {
    let text = text.trim();
    let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
        return (!text.is_empty() && text != "None").then(|| vec![text.to_owned()]);
    };
    let mut items = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let Some(quote) = chars.next() else { break };
        if quote != '\'' && quote != '"' {
            return Some(vec![text.to_owned()]);
        }
        let mut item = String::new();
        loop {
            match chars.next() {
                None => return Some(vec![text.to_owned()]),
                Some('\\') => {
                    if unescape(&mut chars, &mut item).is_none() {
                        return Some(vec![text.to_owned()]);
                    }
                }
                Some(c) if c == quote => break,
                Some(c) => item.push(c),
            }
        }
        items.push(item);
    }
    (!items.is_empty()).then_some(items)
}

/// One escape of a Python string literal, its backslash read: what Python
/// makes of it, pushed to `item`. `None` where Python would refuse the
/// literal (`\x` without two hex digits).
///
/// | written | read |
/// | --- | --- |
/// | `\\` `\'` `\"` | the character |
/// | `\n` `\r` `\t` `\a` `\b` `\f` `\v` | the control character |
/// | `\xhh` `\uhhhh` `\Uhhhhhhhh`, `\ooo` (octal) | that code point (`repr` writes these for the unprintable) |
/// | backslash, newline | nothing (a continued line) |
/// | any other | kept as written, backslash included (`\d`, `\N{...}`) |
fn unescape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, item: &mut String) -> Option<()> {
    let escaped = chars.next()?;
    let c = match escaped {
        '\\' | '\'' | '"' => escaped,
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'v' => '\u{b}',
        'x' => code_point(chars, 2, 16, None)?,
        'u' => code_point(chars, 4, 16, None)?,
        'U' => code_point(chars, 8, 16, None)?,
        '0'..='7' => code_point(chars, 3, 8, escaped.to_digit(8))?,
        '\n' => return Some(()),
        other => {
            item.push('\\');
            other
        }
    };
    item.push(c);
    Some(())
}

/// The code point of an escape's digits in `radix`: hex takes exactly
/// `digits`, octal 1 to `digits` (`first` already read).
fn code_point(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    digits: usize,
    radix: u32,
    first: Option<u32>,
) -> Option<char> {
    let mut value = first.unwrap_or(0);
    let mut read = usize::from(first.is_some());
    while read < digits {
        match chars.peek().and_then(|c| c.to_digit(radix)) {
            Some(digit) => value = value * radix + digit,
            None if radix == 8 => break,
            None => return None,
        }
        chars.next();
        read += 1;
    }
    char::from_u32(value)
}
