use super::*;

/// A small deterministic generator, so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The earliest match in `text`: smallest start, then shortest, then lowest index.
fn earliest(stops: &[String], text: &str) -> Option<(usize, usize, usize)> {
    let mut best: Option<(usize, usize, usize)> = None;
    for (index, stop) in stops.iter().enumerate() {
        if stop.is_empty() {
            continue;
        }
        if let Some(start) = text.find(stop.as_str()) {
            let candidate = (start, stop.len(), index);
            if best.is_none_or(|b| candidate < b) {
                best = Some(candidate);
            }
        }
    }
    best
}

/// Where the earliest possible (complete or still open) match in `text` starts.
fn earliest_possible(stops: &[String], text: &str) -> usize {
    (0..=text.len())
        .find(|&p| {
            let tail = &text.as_bytes()[p..];
            stops.iter().filter(|s| !s.is_empty()).any(|s| {
                let s = s.as_bytes();
                tail.starts_with(s) || (s.starts_with(tail) && !tail.is_empty())
            })
        })
        .unwrap_or(text.len())
}

/// Whether the verdict on the text seen so far is settled: a complete match exists and no
/// open partial match starts before it.
fn settled(stops: &[String], text: &str) -> Option<(usize, usize, usize)> {
    let best = earliest(stops, text)?;
    (earliest_possible(stops, text) >= best.0).then_some(best)
}

/// What the whole stream must produce: the text up to the earliest match (plus the match
/// when visible), and the verdict.
fn reference(stops: &[String], visible: bool, text: &str) -> (String, Verdict) {
    match earliest(stops, text) {
        Some((start, len, stop_index)) => {
            let end = if visible { start + len } else { start };
            (text[..end].to_string(), Verdict::Stopped { stop_index })
        }
        None => (text.to_string(), Verdict::Continue),
    }
}

/// Streams `pieces` through a matcher, checking after every push that exactly the settled
/// part was emitted and that the verdict comes as soon as it is settled.
fn stream(stops: &[String], visible: bool, pieces: &[&str]) -> (String, Verdict) {
    let mut matcher = StopMatcher::new(stops, visible).unwrap();
    let mut out = String::new();
    let mut seen = String::new();
    for piece in pieces {
        seen.push_str(piece);
        let outcome = matcher.push(piece, &mut out);
        match (outcome, settled(stops, &seen)) {
            (Verdict::Continue, None) => {
                let safe = earliest_possible(stops, &seen);
                assert_eq!(out, seen[..safe], "eager and never too eager: {pieces:?}");
            }
            (Verdict::Stopped { stop_index }, Some((_, _, index))) => {
                assert_eq!(stop_index, index, "{pieces:?}");
                let mut after = String::new();
                assert_eq!(matcher.push("more", &mut after), outcome);
                assert_eq!(matcher.finish(&mut after), outcome);
                assert!(after.is_empty(), "nothing after a stop");
                return (out, outcome);
            }
            (got, want) => panic!("{pieces:?}: got {got:?}, settled {want:?}"),
        }
    }
    let outcome = matcher.finish(&mut out);
    (out, outcome)
}

/// `text` cut at random character boundaries (empty pieces included).
fn random_split<'a>(rng: &mut Rng, text: &'a str) -> Vec<&'a str> {
    let mut cuts: Vec<usize> = (0..rng.below(6))
        .map(|_| rng.below(text.len() + 1))
        .filter(|&c| text.is_char_boundary(c))
        .collect();
    cuts.push(0);
    cuts.push(text.len());
    cuts.sort_unstable();
    cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

#[test]
fn hidden_stop_cuts_before_the_match() {
    let stops = strings(&["###"]);
    assert_eq!(
        stream(&stops, false, &["Hello #", "#", "# world"]),
        ("Hello ".to_string(), Verdict::Stopped { stop_index: 0 })
    );
}

#[test]
fn visible_stop_keeps_the_match() {
    let stops = strings(&["", "</answer>"]);
    assert_eq!(
        stream(&stops, true, &["42</ans", "wer> trailing"]),
        (
            "42</answer>".to_string(),
            Verdict::Stopped { stop_index: 1 }
        )
    );
}

#[test]
fn a_false_start_is_released() {
    let stops = strings(&["\n\nUser:"]);
    let mut matcher = StopMatcher::new(&stops, false).unwrap();
    let mut out = String::new();
    assert_eq!(matcher.push("line\n", &mut out), Verdict::Continue);
    assert_eq!(out, "line");
    assert_eq!(matcher.push("\nUse", &mut out), Verdict::Continue);
    assert_eq!(out, "line");
    assert_eq!(matcher.push("d it", &mut out), Verdict::Continue);
    assert_eq!(out, "line\n\nUsed it");
}

#[test]
fn held_text_is_released_at_the_end() {
    let stops = strings(&["STOP"]);
    assert_eq!(
        stream(&stops, false, &["a ST", "O"]),
        ("a STO".to_string(), Verdict::Continue)
    );
}

#[test]
fn an_earlier_start_wins_over_an_earlier_end() {
    // "bc" completes first, but "abcd" starts earlier.
    let stops = strings(&["bc", "abcd"]);
    assert_eq!(
        stream(&stops, false, &["x", "a", "b", "c", "d"]),
        ("x".to_string(), Verdict::Stopped { stop_index: 1 })
    );
    // When "abcd" fails, the waiting "bc" wins.
    assert_eq!(
        stream(&stops, false, &["x", "a", "b", "c", "e"]),
        ("xa".to_string(), Verdict::Stopped { stop_index: 0 })
    );
    // And at the end of the stream.
    assert_eq!(
        stream(&stops, false, &["xab", "c"]),
        ("xa".to_string(), Verdict::Stopped { stop_index: 0 })
    );
}

#[test]
fn at_the_same_start_the_shortest_wins() {
    let stops = strings(&["abc", "ab", "ab"]);
    assert_eq!(
        stream(&stops, true, &["zabc"]),
        ("zab".to_string(), Verdict::Stopped { stop_index: 1 })
    );
}

#[test]
fn no_stops_is_an_append() {
    let mut matcher = StopMatcher::none();
    let mut out = String::new();
    assert_eq!(matcher.push("any ", &mut out), Verdict::Continue);
    assert_eq!(matcher.push("text", &mut out), Verdict::Continue);
    assert_eq!(matcher.finish(&mut out), Verdict::Continue);
    assert_eq!(out, "any text");
    let empty_only = StopMatcher::new(&strings(&["", ""]), false).unwrap();
    assert!(empty_only.stops.is_empty());
}

#[test]
fn bounds_are_enforced() {
    let many = vec!["x".to_string(); MAX_STOPS + 1];
    assert_eq!(
        StopMatcher::new(&many, false).unwrap_err(),
        StopsError::TooMany {
            count: MAX_STOPS + 1
        }
    );
    let long = vec!["ok".to_string(), "y".repeat(MAX_STOP_BYTES + 1)];
    assert_eq!(
        StopMatcher::new(&long, false).unwrap_err(),
        StopsError::TooLong {
            index: 1,
            len: MAX_STOP_BYTES + 1
        }
    );
    assert!(StopMatcher::new(&vec!["z".repeat(MAX_STOP_BYTES); MAX_STOPS], false).is_ok());
}

#[test]
fn held_text_stays_shorter_than_the_longest_stop() {
    let stops = strings(&["aaaaaaab", "aab"]);
    let mut matcher = StopMatcher::new(&stops, false).unwrap();
    let mut out = String::new();
    for _ in 0..1000 {
        assert_eq!(matcher.push("a", &mut out), Verdict::Continue);
        assert!(matcher.held.len() < 8);
    }
    assert_eq!(
        matcher.push("b", &mut out),
        Verdict::Stopped { stop_index: 0 }
    );
    assert_eq!(out.len(), 1000 - 7);
}

#[test]
fn push_after_finish_starts_afresh() {
    let stops = strings(&["ab"]);
    let mut matcher = StopMatcher::new(&stops, false).unwrap();
    let mut out = String::new();
    assert_eq!(matcher.push("xa", &mut out), Verdict::Continue);
    assert_eq!(matcher.finish(&mut out), Verdict::Continue);
    assert_eq!(matcher.push("b", &mut out), Verdict::Continue);
    assert_eq!(out, "xab");
    assert_eq!(
        matcher.push("ab", &mut out),
        Verdict::Stopped { stop_index: 0 }
    );
}

#[test]
fn multi_byte_text_is_never_split() {
    let stops = strings(&["é中", "😀!", "中文"]);
    assert_eq!(
        stream(&stops, false, &["aé", "中b"]),
        ("a".to_string(), Verdict::Stopped { stop_index: 0 })
    );
    assert_eq!(
        stream(&stops, false, &["aé", "é", "😀", "x"]),
        ("aéé😀x".to_string(), Verdict::Continue)
    );
}

/// Random texts over small alphabets (so matches and overlapping partial matches are
/// frequent), random stop lists, random splits: the stream equals the reference and is
/// settled exactly when the reference is.
#[test]
fn streaming_matches_the_reference() {
    let alphabets: [&[&str]; 3] = [&["a", "b"], &["a", "b", "c"], &["a", "é", "中", "😀", " "]];
    let mut rng = Rng(0x5eed_0f57);
    for round in 0..20_000 {
        let alphabet = alphabets[round % alphabets.len()];
        let pick = |rng: &mut Rng, max: usize| -> String {
            (0..rng.below(max) + 1)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        };
        let stops: Vec<String> = (0..rng.below(4) + 1).map(|_| pick(&mut rng, 5)).collect();
        let text = pick(&mut rng, 24);
        let visible = rng.below(2) == 1;
        let pieces = random_split(&mut rng, &text);
        assert_eq!(
            stream(&stops, visible, &pieces),
            reference(&stops, visible, &text),
            "stops {stops:?}, pieces {pieces:?}, visible {visible}"
        );
    }
}

#[test]
fn fixed_lists_match_the_reference() {
    let lists = [
        strings(&["ab", "aab", "ba"]),
        strings(&["aaa", "aa"]),
        strings(&["abab", "bab"]),
        strings(&["abcabd", "cab"]),
    ];
    let mut rng = Rng(42);
    for round in 0..20_000 {
        let stops = &lists[round % lists.len()];
        let text: String = (0..rng.below(16))
            .map(|_| ["a", "b", "c", "d"][rng.below(4)])
            .collect();
        let pieces = random_split(&mut rng, &text);
        for visible in [false, true] {
            assert_eq!(
                stream(stops, visible, &pieces),
                reference(stops, visible, &text),
                "stops {stops:?}, pieces {pieces:?}"
            );
        }
    }
}
