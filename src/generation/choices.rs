//! The `n` sequences of one generation, each decoded on its own: the engine interleaves
//! their chunks and sends a complete per sequence, each naming its sequence by `index`.
//!
//! A sequence ends with its complete or with a stop string the gateway matched; a stop
//! string ends only its own sequence (the engine cannot stop one sequence of a request,
//! so its later ids are read and dropped). The generation is over when every sequence is;
//! the engine has nothing left to stop only when it completed every sequence itself.

use super::decode::Decoding;
use super::delta::{Delta, Finish};
use super::parse::Parsing;
use crate::engine::{Complete, TokenLogprob};
use crate::http::error::GatewayError;

/// One sequence: its decoding, its output parsers (a chat choice on a worker that has
/// them) and what it has made final but not yet answered.
pub struct Choice {
    pub decoding: Decoding,
    parsing: Option<Parsing>,
    pub delta: Delta,
    pub finish: Option<Finish>,
    /// The engine sent this sequence's complete.
    completed: bool,
    /// The ids the engine says it generated, when it ended the sequence itself: the
    /// answer's count (the gateway's own count stands where a stop string of its own ended
    /// the sequence, or where the engine does not say).
    generated: Option<u32>,
}

/// What an engine event did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// Sequence `index` goes on.
    Going(u32),
    /// Sequence `index` is over (the engine finished it, or a stop string matched).
    Finished(u32, Finish),
    /// The event was for a sequence already over: nothing changed.
    Ignored,
}

impl Choice {
    /// Ends the choice: its parsers give up what they held, and a choice that called a
    /// function and stopped by itself finishes with `tool_calls`.
    fn end(&mut self, finish: Finish) -> Finish {
        let finish = match &mut self.parsing {
            Some(parsing) => {
                parsing.finish(&mut self.delta);
                if parsing.called() && finish == Finish::Stop {
                    Finish::ToolCalls
                } else {
                    finish
                }
            }
            None => finish,
        };
        self.finish = Some(finish);
        finish
    }
}

pub struct Choices {
    list: Vec<Choice>,
    finished: usize,
    completed: usize,
}

impl Choices {
    /// One choice per decoding (with its parsing, if any), indexed in order.
    pub fn new(decodings: Vec<(Decoding, Option<Parsing>)>) -> Choices {
        Choices {
            list: decodings
                .into_iter()
                .map(|(decoding, parsing)| Choice {
                    decoding,
                    parsing,
                    delta: Delta::default(),
                    finish: None,
                    completed: false,
                    generated: None,
                })
                .collect(),
            finished: 0,
            completed: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there is no choice (never, for a generation: `n` is at least 1).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The choices, by index.
    pub fn iter(&self) -> impl Iterator<Item = &Choice> {
        self.list.iter()
    }

    pub fn get_mut(&mut self, index: u32) -> Option<&mut Choice> {
        self.list.get_mut(index as usize)
    }

    /// Every sequence is over.
    pub fn all_finished(&self) -> bool {
        self.finished == self.list.len()
    }

    /// The engine completed every sequence itself: nothing to abort.
    pub fn engine_done(&self) -> bool {
        self.completed == self.list.len()
    }

    /// Completion tokens over all choices: each as the engine counted it when it ended
    /// the choice, else the ids the choice consumed.
    pub fn tokens(&self) -> u32 {
        self.list.iter().fold(0u32, |sum, c| {
            sum.saturating_add(c.generated.unwrap_or(c.decoding.tokens))
        })
    }

    /// New ids of sequence `index`.
    pub fn chunk(
        &mut self,
        index: u32,
        ids: &[u32],
        scores: Vec<Option<TokenLogprob>>,
    ) -> Result<Applied, GatewayError> {
        let choice = self.choice(index)?;
        if choice.finish.is_some() {
            return Ok(Applied::Ignored);
        }
        let from = choice.delta.text.len();
        let stopped = choice.decoding.push(ids, scores, &mut choice.delta);
        if let Some(parsing) = &mut choice.parsing {
            parsing.push(&mut choice.delta, from);
        }
        if stopped {
            let finish = choice.end(Finish::Stop);
            self.finished += 1;
            return Ok(Applied::Finished(index, finish));
        }
        Ok(Applied::Going(index))
    }

    /// The engine's end of sequence `complete.index`.
    pub fn complete(&mut self, complete: Complete) -> Result<Applied, GatewayError> {
        let index = complete.index;
        let choice = self.choice(index)?;
        if choice.completed {
            return Err(GatewayError::EngineFailed {
                message: format!("the engine completed sequence {index} twice"),
            });
        }
        choice.completed = true;
        self.completed += 1;
        let choice = self.choice(index)?;
        if choice.finish.is_some() {
            return Ok(Applied::Ignored);
        }
        // Every id came in chunks (a streamed complete carries none that is new): what the
        // stop matcher held back is final now.
        let from = choice.delta.text.len();
        choice.decoding.finish(&mut choice.delta);
        let finish = if choice.decoding.stopped() {
            Finish::Stop
        } else {
            match complete.finish_reason.as_str() {
                "length" => Finish::Length,
                // The engine ended the sequence for its own reasons (SGLang and vLLM
                // `abort`, vLLM `error`, TensorRT-LLM `cancelled` and `timeout`).
                reason @ ("abort" | "cancelled" | "error" | "timeout") => {
                    return Err(GatewayError::EngineFailed {
                        message: format!("the engine ended the generation: {reason}"),
                    })
                }
                _ => Finish::Stop,
            }
        };
        if !choice.decoding.stopped() && complete.completion_tokens > 0 {
            choice.generated = Some(complete.completion_tokens);
        }
        if let Some(parsing) = &mut choice.parsing {
            parsing.push(&mut choice.delta, from);
        }
        let finish = choice.end(finish);
        self.finished += 1;
        Ok(Applied::Finished(index, finish))
    }

    fn choice(&mut self, index: u32) -> Result<&mut Choice, GatewayError> {
        let n = self.list.len();
        self.list
            .get_mut(index as usize)
            .ok_or_else(|| GatewayError::EngineFailed {
                message: format!("the engine sent sequence {index} of a request for {n}"),
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::Tokenizer;

    use super::*;
    use crate::chat::boundaries::Boundaries;
    use crate::chat::detokenize::TokenBytes;
    use crate::chat::language::Language;

    /// Ids 0..3 are "a", "b", "c", "d" (no decoder: joined by spaces, windowed).
    pub(crate) fn language() -> Language {
        let vocab = [("a", 0), ("b", 1), ("c", 2), ("d", 3)]
            .into_iter()
            .map(|(t, id)| (t.to_string(), id))
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token("a".into())
            .build()
            .unwrap();
        let tokenizer = Tokenizer::new(model);
        Language {
            vocab_end: crate::chat::language::vocab_end(&tokenizer),
            bytes_per_token: crate::chat::language::bytes_per_token(&tokenizer),
            boundaries: Boundaries::of(&tokenizer),
            bytes: Arc::new(TokenBytes::new(&tokenizer)),
            encoder: Arc::new(crate::chat::encoder::Encoder::new(
                Arc::new(tokenizer.clone()),
                None,
            )),
            tokenizer: Arc::new(tokenizer),
            template: None,
            bos_token: None,
            eos_token: None,
            eos_ids: vec![],
            source: PathBuf::new(),
        }
    }

    fn choices(n: usize, stops: &[String]) -> Choices {
        let lang = language();
        Choices::new(
            (0..n)
                .map(|_| {
                    let decoding = Decoding::new(&lang, stops, false, true, vec![], false).unwrap();
                    (decoding, None)
                })
                .collect(),
        )
    }

    fn complete(index: u32, reason: &str) -> Complete {
        Complete {
            index,
            finish_reason: reason.into(),
            prompt_tokens: 0,
            completion_tokens: 0,
            kv_transfer_params: None,
        }
    }

    #[test]
    fn sequences_are_decoded_apart_and_end_together() {
        let mut c = choices(2, &[]);
        assert_eq!(c.chunk(1, &[2], vec![]).unwrap(), Applied::Going(1));
        assert_eq!(c.chunk(0, &[0], vec![]).unwrap(), Applied::Going(0));
        assert_eq!(
            c.complete(complete(0, "length")).unwrap(),
            Applied::Finished(0, Finish::Length)
        );
        assert!(!c.all_finished());
        assert_eq!(
            c.complete(complete(1, "stop")).unwrap(),
            Applied::Finished(1, Finish::Stop)
        );
        assert!(c.all_finished() && c.engine_done());
        assert_eq!(c.tokens(), 2);
        let texts: Vec<&str> = c.iter().map(|ch| ch.delta.text.as_str()).collect();
        assert_eq!(texts, ["a", "c"]);
    }

    #[test]
    fn a_stop_string_ends_only_its_sequence() {
        let mut c = choices(2, &["c".to_string()]);
        assert_eq!(
            c.chunk(0, &[0, 2, 1], vec![]).unwrap(),
            Applied::Finished(0, Finish::Stop)
        );
        assert_eq!(c.chunk(0, &[3], vec![]).unwrap(), Applied::Ignored);
        assert_eq!(c.chunk(1, &[1], vec![]).unwrap(), Applied::Going(1));
        assert!(!c.all_finished());
        // The engine still completes the stopped sequence: nothing changes for it.
        assert_eq!(c.complete(complete(0, "length")).unwrap(), Applied::Ignored);
        assert_eq!(
            c.complete(complete(1, "length")).unwrap(),
            Applied::Finished(1, Finish::Length)
        );
        assert!(c.all_finished() && c.engine_done());
        // Counted up to the id that completed the stop string.
        assert_eq!(c.tokens(), 3);
    }

    #[test]
    fn the_engine_counts_what_it_generated() {
        let mut c = choices(2, &[]);
        c.chunk(0, &[0, 1], vec![]).unwrap();
        c.chunk(1, &[2], vec![]).unwrap();
        // Sequence 0 ended on an EOS id the engine counted and sent no chunk for (a
        // service that does); sequence 1's engine did not say.
        let counted = Complete {
            completion_tokens: 3,
            ..complete(0, "stop")
        };
        c.complete(counted).unwrap();
        c.complete(complete(1, "length")).unwrap();
        assert_eq!(c.tokens(), 4);
    }

    #[test]
    fn bad_indexes_and_aborts_fail_the_generation() {
        let mut c = choices(2, &[]);
        assert!(c.chunk(2, &[0], vec![]).is_err());
        assert!(c.complete(complete(5, "stop")).is_err());
        assert!(c.complete(complete(0, "abort")).is_err());
        for reason in ["cancelled", "error", "timeout"] {
            let mut c = choices(1, &[]);
            assert!(c.complete(complete(0, reason)).is_err(), "{reason}");
        }
        assert!(c.complete(complete(0, "stop")).is_err(), "completed twice");
        assert!(!c.engine_done());
    }
}
