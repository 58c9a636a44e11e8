//! The open/close-tag splitter most families are configurations of: an optional reasoning
//! block at the very start of the output, `<open>reasoning<close>answer`.
//!
//! One machine, the same for every family, so that the rules below hold for all of them:
//!
//! - **Only the first block counts.** The opening marker is recognised only at the start of
//!   the output (after newlines); once reasoning is closed, the rest is the answer verbatim,
//!   markers included, so a model that quotes `<think>` in its answer keeps it.
//! - **Where the output starts** is the family's choice (`Start`): in the answer with no
//!   block possible (thinking disabled), at a point where an opening marker may come, or
//!   already inside reasoning (the prompt opened the block, or the family always reasons); in
//!   the last case an echoed opening marker is dropped.
//! - **Newlines around markers** (`\n`, `\r`; never spaces or tabs, which can be
//!   indentation) are dropped: those leading the reasoning, those right before the marker that
//!   ends it, and those right after a closing marker. So `<think>\nabc\n</think>\n\nanswer`
//!   splits into `abc` and `answer`. Newlines before an opening marker at the start are
//!   dropped with it, and kept as answer text if no marker comes.
//! - **Implicit ends**: some families end reasoning, without a closing marker, where a
//!   tool-call block opens; that marker is not consumed but starts the answer, so the
//!   tool-call parser still sees it.
//! - **Unclosed reasoning** stays reasoning to the end (the output was cut off while
//!   thinking); a closing marker that comes before any opening one, outside reasoning, is
//!   answer text.
//!
//! What is held back: a proper prefix of a marker at the end of what was fed (a few bytes),
//! plus a run of newlines that a marker may still follow. That run is capped at
//! `MAX_HELD_NEWLINES`: within reasoning only its last `MAX_HELD_NEWLINES` are dropped at a
//! marker, the rest is reasoning; at the start a longer run means no block opens. Both
//! depend only on the text, never on how it was cut.

use super::{ReasoningDelta, ReasoningParser, MAX_HELD_BYTES};

/// The characters dropped around markers.
const NEWLINES: [char; 2] = ['\n', '\r'];

/// Newlines held back at most while a marker may still follow them (well inside
/// [`MAX_HELD_BYTES`], with room for a marker's prefix).
pub(super) const MAX_HELD_NEWLINES: usize = MAX_HELD_BYTES / 2;

/// A family's markers.
pub(super) struct Tags {
    /// Markers that open reasoning (any of them).
    pub open: &'static [&'static str],
    /// Markers that close it (any of them, whichever opened it).
    pub close: &'static [&'static str],
    /// Markers that end reasoning and begin the answer themselves (a tool-call block's
    /// opening), kept in the answer.
    pub implicit_end: &'static [&'static str],
}

/// Where a family's output starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Start {
    /// In the answer, with no reasoning block possible: everything is text.
    Answer,
    /// Where an opening marker may come first.
    MayOpen,
    /// Inside reasoning.
    Reasoning,
}

/// The splitter for `tags`, starting at `start`.
pub(super) fn splitter(tags: &'static Tags, start: Start) -> Box<dyn ReasoningParser> {
    let phase = match start {
        Start::Answer => Phase::Answer { fresh: false },
        Start::MayOpen => Phase::MayOpen,
        Start::Reasoning => Phase::Opened,
    };
    Box::new(TagSplitter {
        tags,
        phase,
        partial: String::new(),
        newlines: String::new(),
    })
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    /// At the start, where an opening marker may come after newlines (held in `newlines`).
    MayOpen,
    /// At the start of reasoning already open: an echoed opening marker is dropped.
    Opened,
    /// Inside reasoning; `fresh` until its first character that is not a newline.
    Reasoning { fresh: bool },
    /// The answer; `fresh` right after a closing marker, until its first non-newline.
    Answer { fresh: bool },
}

struct TagSplitter {
    tags: &'static Tags,
    phase: Phase,
    /// The end of what was fed that is a proper prefix of a marker the phase looks for.
    partial: String,
    /// Newlines held back: at the start before a possible opening marker, or at the end of
    /// the reasoning so far before a possible closing one.
    newlines: String,
}

impl ReasoningParser for TagSplitter {
    fn push(&mut self, text: &str, out: &mut Vec<ReasoningDelta>) {
        if self.partial.is_empty() {
            self.feed(text, out);
        } else {
            let mut joined = std::mem::take(&mut self.partial);
            joined.push_str(text);
            self.feed(&joined, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<ReasoningDelta>) {
        let mut held = std::mem::take(&mut self.newlines);
        held.push_str(&std::mem::take(&mut self.partial));
        match self.phase {
            Phase::MayOpen | Phase::Answer { .. } => push_text(out, &held),
            Phase::Opened | Phase::Reasoning { .. } => push_reasoning(out, held),
        }
        self.phase = Phase::Answer { fresh: false };
    }
}

impl TagSplitter {
    /// Runs `text` through the phases; whatever may still be a marker ends in `partial`.
    fn feed(&mut self, text: &str, out: &mut Vec<ReasoningDelta>) {
        let mut rest = Some(text);
        while let Some(text) = rest {
            rest = match self.phase {
                Phase::MayOpen | Phase::Opened => self.at_start(text, out),
                Phase::Reasoning { fresh } => self.in_reasoning(text, fresh, out),
                Phase::Answer { fresh } => {
                    let body = if fresh { trim_newlines(text) } else { text };
                    if !body.is_empty() {
                        self.phase = Phase::Answer { fresh: false };
                        push_text(out, body);
                    }
                    None
                }
            };
        }
    }

    /// At the start: skips newlines (holding them while a block may still open), then
    /// decides whether an opening marker is there. Returns what is left for the next phase,
    /// or `None` when everything was used or held.
    fn at_start<'t>(&mut self, text: &'t str, out: &mut Vec<ReasoningDelta>) -> Option<&'t str> {
        let body = trim_newlines(text);
        let may_open = matches!(self.phase, Phase::MayOpen);
        if may_open {
            let newlines = text.len() - body.len();
            self.newlines.push_str(text.get(..newlines).unwrap_or(""));
            if self.newlines.len() > MAX_HELD_NEWLINES {
                push_text(out, &std::mem::take(&mut self.newlines));
                self.phase = Phase::Answer { fresh: false };
                return Some(body);
            }
        }
        if body.is_empty() {
            return None;
        }
        match opening(body, self.tags.open) {
            Opening::Full(len) => {
                self.newlines.clear();
                self.phase = Phase::Reasoning { fresh: true };
                body.get(len..)
            }
            Opening::Partial => {
                body.clone_into(&mut self.partial);
                None
            }
            Opening::No if may_open => {
                push_text(out, &std::mem::take(&mut self.newlines));
                self.phase = Phase::Answer { fresh: false };
                Some(body)
            }
            Opening::No => {
                self.phase = Phase::Reasoning { fresh: false };
                Some(body)
            }
        }
    }

    /// Inside reasoning: emits it up to the marker that ends it, or up to what may still be
    /// one. Returns the answer's start, if it came.
    fn in_reasoning<'t>(
        &mut self,
        text: &'t str,
        fresh: bool,
        out: &mut Vec<ReasoningDelta>,
    ) -> Option<&'t str> {
        let body = if fresh { trim_newlines(text) } else { text };
        if body.is_empty() {
            return None;
        }
        self.phase = Phase::Reasoning { fresh: false };
        let ends = [self.tags.close, self.tags.implicit_end];
        let Some(found) = find_first(body, &ends) else {
            let (emitted, held) = split_held(body, &ends);
            self.emit_reasoning(emitted, out);
            held.clone_into(&mut self.partial);
            return None;
        };
        self.emit_reasoning(body.get(..found.at).unwrap_or(""), out);
        self.newlines.clear();
        if found.group == 0 {
            self.phase = Phase::Answer { fresh: true };
            body.get(found.at + found.len..)
        } else {
            self.phase = Phase::Answer { fresh: false };
            body.get(found.at..)
        }
    }

    /// Emits `piece` of reasoning, holding back its trailing newlines (up to the cap) in
    /// case a marker follows them.
    fn emit_reasoning(&mut self, piece: &str, out: &mut Vec<ReasoningDelta>) {
        let body = piece.trim_end_matches(NEWLINES);
        if !body.is_empty() {
            let mut emitted = std::mem::take(&mut self.newlines);
            emitted.push_str(body);
            push_reasoning(out, emitted);
        }
        self.newlines
            .push_str(piece.get(body.len()..).unwrap_or(""));
        if let Some(excess) = self.newlines.len().checked_sub(MAX_HELD_NEWLINES) {
            let held = std::mem::take(&mut self.newlines);
            // Newlines are single bytes, so the split cannot fail; if it did, hold nothing.
            let (emitted, kept) = held.split_at_checked(excess).unwrap_or((&held, ""));
            push_reasoning(out, emitted.to_owned());
            kept.clone_into(&mut self.newlines);
        }
    }
}

/// `s` without its leading newlines.
fn trim_newlines(s: &str) -> &str {
    s.trim_start_matches(NEWLINES)
}

fn push_text(out: &mut Vec<ReasoningDelta>, s: &str) {
    if !s.is_empty() {
        out.push(ReasoningDelta::Text(s.to_owned()));
    }
}

fn push_reasoning(out: &mut Vec<ReasoningDelta>, s: String) {
    if !s.is_empty() {
        out.push(ReasoningDelta::Reasoning(s));
    }
}

/// How the start of some text compares with the opening markers.
enum Opening {
    /// It starts with one, this long.
    Full(usize),
    /// It is a proper prefix of one.
    Partial,
    /// Neither.
    No,
}

fn opening(s: &str, open: &[&str]) -> Opening {
    if let Some(marker) = open.iter().find(|m| s.starts_with(**m)) {
        return Opening::Full(marker.len());
    }
    if open.iter().any(|m| m.starts_with(s)) {
        Opening::Partial
    } else {
        Opening::No
    }
}

/// A marker found in some text.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// Its byte offset.
    pub at: usize,
    /// Its length in bytes.
    pub len: usize,
    /// Which group of markers it belongs to.
    pub group: usize,
}

/// The first marker of any group in `hay` (the longest one where several start together).
pub(super) fn find_first(hay: &str, groups: &[&[&str]]) -> Option<Found> {
    let mut best: Option<Found> = None;
    for (group, markers) in groups.iter().enumerate() {
        for marker in markers.iter() {
            let Some(at) = hay.find(marker) else { continue };
            let better = match &best {
                None => true,
                Some(b) => at < b.at || (at == b.at && marker.len() > b.len),
            };
            if better {
                best = Some(Found {
                    at,
                    len: marker.len(),
                    group,
                });
            }
        }
    }
    best
}

/// The length of the longest suffix of `hay` that is a proper prefix of a marker: what must
/// be held back because the next piece may complete it. (A suffix equal to a prefix of a
/// marker starts with the marker's first byte, so it starts on a character boundary.)
pub(super) fn held_suffix(hay: &str, groups: &[&[&str]]) -> usize {
    let longest = groups
        .iter()
        .flat_map(|markers| markers.iter())
        .map(|m| m.len())
        .max()
        .unwrap_or(0);
    let bytes = hay.as_bytes();
    let from = bytes.len().saturating_sub(longest.saturating_sub(1));
    for start in from..bytes.len() {
        let Some(tail) = bytes.get(start..) else {
            break;
        };
        let is_prefix = groups
            .iter()
            .flat_map(|markers| markers.iter())
            .any(|m| m.len() > tail.len() && m.as_bytes().starts_with(tail));
        if is_prefix {
            return tail.len();
        }
    }
    0
}

/// `hay` split before [`held_suffix`]: what can be emitted, and what must be held.
pub(super) fn split_held<'h>(hay: &'h str, groups: &[&[&str]]) -> (&'h str, &'h str) {
    let at = hay.len() - held_suffix(hay, groups);
    // The held part starts with a marker's first byte, a character boundary; if it did
    // not, holding nothing is the safe side.
    hay.split_at_checked(at).unwrap_or((hay, ""))
}

/// What every family's tests check.
#[cfg(test)]
pub(super) mod testing {
    use crate::parsers::cuttings::cuttings;
    use crate::parsers::reasoning::{collect, split_whole, ReasoningDelta, ReasoningParser, Split};

    /// `text` split whole gives `reasoning` and `answer`; every cutting of it gives the
    /// same, with no empty delta, and what is emitted is `text` with pieces left out (the
    /// markers and the documented newlines), never anything added or reordered.
    pub fn check(
        make: &dyn Fn() -> Box<dyn ReasoningParser>,
        text: &str,
        reasoning: &str,
        answer: &str,
    ) {
        let expected = Split {
            reasoning: reasoning.to_owned(),
            text: answer.to_owned(),
        };
        let whole = split_whole(make().as_mut(), text);
        assert_eq!(whole, expected, "whole: {text:?}");
        for (i, pieces) in cuttings(text, 200, text.len() as u64).iter().enumerate() {
            let mut parser = make();
            let mut out = Vec::new();
            for piece in pieces {
                parser.push(piece, &mut out);
            }
            parser.finish(&mut out);
            assert_eq!(collect(&out), whole, "cutting {i} {pieces:?} of {text:?}");
            let mut emitted = String::new();
            for delta in &out {
                let (ReasoningDelta::Reasoning(s) | ReasoningDelta::Text(s)) = delta;
                assert!(!s.is_empty(), "empty delta, cutting {pieces:?}");
                emitted.push_str(s);
            }
            assert_subsequence(&emitted, text);
        }
    }

    /// Every character of `part` appears in `whole`, in order.
    fn assert_subsequence(part: &str, whole: &str) {
        let mut chars = whole.chars();
        for c in part.chars() {
            assert!(
                chars.any(|w| w == c),
                "{part:?} is not {whole:?} with pieces left out"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::check;
    use super::*;
    use crate::parsers::reasoning::{collect, split_whole, Split};

    static TAGS: Tags = Tags {
        open: &["<think>"],
        close: &["</think>"],
        implicit_end: &["<tool_call>"],
    };

    fn may_open() -> Box<dyn ReasoningParser> {
        splitter(&TAGS, Start::MayOpen)
    }

    fn opened() -> Box<dyn ReasoningParser> {
        splitter(&TAGS, Start::Reasoning)
    }

    #[test]
    fn finds_the_first_and_longest_marker() {
        let groups: [&[&str]; 2] = [&["</think>"], &["</th", "<tool_call>"]];
        let found = find_first("ab</think>", &groups);
        assert_eq!(
            found,
            Some(Found {
                at: 2,
                len: 8,
                group: 0
            })
        );
        assert_eq!(
            find_first("x<tool_call></think>", &groups).map(|f| f.group),
            Some(1)
        );
        assert_eq!(find_first("none", &groups), None);
    }

    #[test]
    fn holds_only_a_marker_prefix() {
        let groups: [&[&str]; 1] = [&["</think>", "◁/think▷"]];
        assert_eq!(held_suffix("abc</thi", &groups), 5);
        assert_eq!(held_suffix("abc<", &groups), 1);
        assert_eq!(held_suffix("abc</think>", &groups), 0);
        assert_eq!(held_suffix("abc", &groups), 0);
        assert_eq!(held_suffix("é◁/thi", &groups), "◁/thi".len());
        assert_eq!(held_suffix("", &groups), 0);
    }

    #[test]
    fn splits_a_block_and_trims_newlines_around_markers() {
        check(
            &may_open,
            "<think>\nabc\n</think>\n\nanswer",
            "abc",
            "answer",
        );
        check(&may_open, "\n<think>a\r\nb</think>x\n", "a\r\nb", "x\n");
        check(
            &opened,
            "abc\n\n</think>\n\n  indented",
            "abc",
            "  indented",
        );
        check(&opened, "<think>\nabc</think>answer", "abc", "answer");
    }

    #[test]
    fn a_missing_block_leaves_the_text_alone() {
        check(
            &may_open,
            "\n\nplain <think> text",
            "",
            "\n\nplain <think> text",
        );
        check(&may_open, "</think>answer", "", "</think>answer");
        check(&may_open, "<thinking>", "", "<thinking>");
        check(&may_open, "<thin", "", "<thin");
    }

    #[test]
    fn implicit_end_starts_the_answer() {
        check(
            &may_open,
            "<think>plan\n<tool_call>{\"name\":\"f\"}</tool_call>",
            "plan",
            "<tool_call>{\"name\":\"f\"}</tool_call>",
        );
    }

    #[test]
    fn unclosed_reasoning_keeps_everything() {
        check(&opened, "abc\n\n</thi", "abc\n\n</thi", "");
        check(&may_open, "<think>abc\n", "abc\n", "");
    }

    #[test]
    fn answer_start_passes_everything() {
        let make = || splitter(&TAGS, Start::Answer);
        check(&make, "<think>a</think>b", "", "<think>a</think>b");
    }

    #[test]
    fn long_newline_runs_are_bounded() {
        let run = "\n".repeat(MAX_HELD_NEWLINES + 10);
        // Inside reasoning: only the last MAX_HELD_NEWLINES are dropped at the marker,
        // and they are never all held at once.
        let mut parser = opened();
        let mut out = Vec::new();
        parser.push("a", &mut out);
        for _ in 0..run.len() {
            parser.push("\n", &mut out);
        }
        parser.push("</think>b", &mut out);
        parser.finish(&mut out);
        let split = collect(&out);
        // (Compared as booleans: a failure would print 32 KiB of newlines.)
        assert!(split.reasoning == format!("a{}", "\n".repeat(10)));
        assert_eq!(split.text, "b");
        let whole = split_whole_of(opened(), &format!("a{run}</think>b"));
        assert!(whole == split);
        // At the start: a run past the cap means no block.
        let text = format!("{run}<think>x");
        assert!(split_whole_of(may_open(), &text).text == text);
        let text = format!("{}<think>x", "\n".repeat(MAX_HELD_NEWLINES));
        assert!(split_whole_of(may_open(), &text).reasoning == "x");
    }

    fn split_whole_of(mut parser: Box<dyn ReasoningParser>, text: &str) -> Split {
        split_whole(parser.as_mut(), text)
    }

    #[test]
    fn per_token_cost_is_small() {
        // Not a benchmark: a guard against rescans (quadratic cost), with a very loose bound.
        let mut parser = opened();
        let mut out = Vec::new();
        let start = std::time::Instant::now();
        for _ in 0..200_000 {
            parser.push("word", &mut out);
            out.clear();
        }
        assert!(start.elapsed().as_secs() < 5);
    }
}
