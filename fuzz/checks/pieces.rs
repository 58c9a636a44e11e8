//! Cutting a fuzz input's text into the pieces a streaming text parser is fed, shared by
//! the targets that check that a model-output parser's result does not depend on how the
//! detokenizer cut the text (`tool_parsers`, `reasoning_parsers`).
//!
//! Layout after the target's selector byte: a count byte `k` (`% 16`), then `k` step bytes,
//! then the text (lossy UTF-8). The steps, cycled, are the sizes of the pieces in bytes
//! (`% 64`, moved forward to the next character boundary); a step of 0 pushes an empty
//! piece and then one character. With no steps the text goes a character at a time.

/// The steps and the text of `data` (what follows the selector byte).
pub fn layout(data: &[u8]) -> (&[u8], String) {
    let Some((&count, rest)) = data.split_first() else {
        return (&[], String::new());
    };
    let k = usize::from(count % 16).min(rest.len());
    let (steps, text) = rest.split_at(k);
    (steps, String::from_utf8_lossy(text).into_owned())
}

/// `text` cut by `steps` (see the module doc). The pieces concatenate to `text`.
pub fn cut<'t>(text: &'t str, steps: &[u8]) -> Vec<&'t str> {
    let mut pieces = Vec::new();
    let mut from = 0;
    let mut steps = steps.iter().cycle();
    while from < text.len() {
        let step = steps.next().map_or(0, |&s| usize::from(s % 64));
        if step == 0 {
            pieces.push(&text[from..from]);
        }
        let mut to = (from + step.max(1)).min(text.len());
        while !text.is_char_boundary(to) {
            to += 1;
        }
        pieces.push(&text[from..to]);
        from = to;
    }
    pieces
}
