//! What the fast path learns from, and checks against, the Hugging Face tokenizer at load:
//! the ids the post-processor adds around a sequence, and agreement on a varied sample.

use tokenizers::Tokenizer;

use super::{FastBpe, Unsupported};

/// Probes for the post-processor's ids; two so that a coincidence cannot pass.
const PROBES: [&str; 2] = ["Hello world, probing the post-processor.", "x = 42;\n\ty"];

/// The built-in sample: prose, code, numbers, whitespace runs, line ends, contractions in
/// both cases, other scripts, marks, emoji and digits of other scripts.
const SAMPLE: &[&str] = &[
    "",
    " ",
    "Hello, world! It's a test: we'll see, they've said, I'd say I'm sure, you're right.",
    "IT'S WE'LL THEY'VE I'D I'M YOU'RE 'S 'T 'Re 'vE 'ſ don'ſ",
    "fn main() {\n    let x: Vec<u32> = (0..1_000_000).collect();\r\n\tprintln!(\"{x:?}\");\n}\n",
    "Numbers 1 12 123 1234 12345 3.14159 1,000,000 and ٣٤٥ ১২৩ ⅣⅫ ²³",
    "  leading and trailing  \n\n\n  spaces\t\t\r\n\r\n   \u{a0}\u{3000}x\u{2028}y  ",
    "日本語のテキストと中文文本，한국어 텍스트 ভাষা Ελληνικά русский язык עברית العربية",
    "Combining: e\u{301} a\u{308}\u{323} ñ — emoji 🤖👍🏽 👨‍👩‍👧 ❤️ 🇫🇷",
    "MixedCase CamelCaseWord HTTPServer iPhone ǅungla DŽ ǈ ʰʲ",
    "path/to/file.rs?x=1&y=2 //comment /* block */ <tag attr=\"v\"/> a--b...c!!!",
    "\n \n\n  \n\t",
    "x  \n",
    "tab\tsep\tvalues\n",
];

/// The ids the post-processor adds before and after a single sequence: the no-special ids
/// of a probe appear once, contiguous, inside its with-special ids.
pub fn specials(
    fast: &FastBpe,
    tokenizer: &Tokenizer,
) -> Result<(Vec<u32>, Vec<u32>), Unsupported> {
    let mut found: Option<(Vec<u32>, Vec<u32>)> = None;
    for probe in PROBES {
        let plain = hf(tokenizer, probe, false)?;
        let full = hf(tokenizer, probe, true)?;
        let at = (0..=full.len().saturating_sub(plain.len()))
            .find(|at| full.get(*at..at + plain.len()) == Some(plain.as_slice()));
        let Some(at) = at else {
            return Err(Unsupported("post-processor rewrites the sequence".into()));
        };
        let prefix = full.get(..at).unwrap_or_default().to_vec();
        let suffix = full.get(at + plain.len()..).unwrap_or_default().to_vec();
        if found
            .as_ref()
            .is_some_and(|f| *f != (prefix.clone(), suffix.clone()))
        {
            return Err(Unsupported(
                "post-processor adds different ids to different texts".into(),
            ));
        }
        found = Some((prefix, suffix));
        // The fast path's own ids of the probe must already agree.
        if fast.encode(probe, false).as_deref() != Some(plain.as_slice()) {
            return Err(Unsupported(format!("self-test disagreed at {probe:?}")));
        }
    }
    Ok(found.unwrap_or_default())
}

/// Every sample, and the sample with added tokens woven in, encodes alike both ways.
pub fn agree(fast: &FastBpe, tokenizer: &Tokenizer) -> Result<(), Unsupported> {
    let mut added: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .into_values()
        .map(|t| t.content)
        .collect();
    added.sort();
    added.truncate(24);
    let mut texts: Vec<String> = SAMPLE.iter().map(|s| s.to_string()).collect();
    texts.push(SAMPLE.concat());
    for (k, token) in added.iter().enumerate() {
        let around = SAMPLE.get(k % SAMPLE.len()).copied().unwrap_or_default();
        texts.push(format!("{token}{around}{token} x{token}\n"));
    }
    for text in &texts {
        for add_special in [false, true] {
            let want = hf(tokenizer, text, add_special)?;
            let got = fast.encode(text, add_special);
            if got.is_some_and(|got| got != want) {
                return Err(Unsupported(format!("self-test disagreed at {text:?}")));
            }
        }
    }
    Ok(())
}

fn hf(tokenizer: &Tokenizer, text: &str, add_special: bool) -> Result<Vec<u32>, Unsupported> {
    tokenizer
        .encode_fast(text, add_special)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| {
            Unsupported(format!(
                "the Hugging Face tokenizer failed the self-test: {e}"
            ))
        })
}
