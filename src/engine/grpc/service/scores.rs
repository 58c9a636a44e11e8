//! Log probabilities as the engines send them, lined up with the ids they score.
//!
//! SGLang, vLLM, TokenSpeed and MLX send parallel lists (`OutputLogProbs`); TensorRT-LLM
//! one entry per token. Both become [`Scores`], and [`aligned`] hands each id its own
//! entry, so the pipeline never guesses which score belongs to which token.

use crate::engine::grpc::{mlx, sglang, tokenspeed, trtllm, vllm};
use crate::engine::TokenLogprob;

/// One message's log probabilities: `values[i]` scores `ids[i]`; `top[i]` are the
/// likeliest tokens at that position.
pub(super) struct Scores {
    values: Vec<f32>,
    ids: Vec<u32>,
    top: Vec<Vec<(u32, f32)>>,
}

/// `From` for each service's `OutputLogProbs`: the messages are alike field for field.
macro_rules! scores_from {
    ($($message:ty),+) => {$(
        impl From<$message> for Scores {
            fn from(lp: $message) -> Scores {
                let top = lp
                    .top_logprobs
                    .into_iter()
                    .map(|t| t.token_ids.into_iter().zip(t.values).collect())
                    .collect();
                Scores {
                    values: lp.token_logprobs,
                    ids: lp.token_ids,
                    top,
                }
            }
        }
    )+};
}

scores_from!(
    sglang::OutputLogProbs,
    vllm::OutputLogProbs,
    tokenspeed::OutputLogProbs,
    mlx::OutputLogProbs
);

impl Scores {
    /// TensorRT-LLM's entries; `None` when the message carries none (not asked).
    pub(super) fn of_tokens(entries: Vec<trtllm::TokenLogprob>) -> Option<Scores> {
        if entries.is_empty() {
            return None;
        }
        let mut scores = Scores {
            values: Vec::with_capacity(entries.len()),
            ids: Vec::with_capacity(entries.len()),
            top: Vec::with_capacity(entries.len()),
        };
        for entry in entries {
            scores.values.push(entry.logprob);
            scores.ids.push(entry.token_id);
            scores.top.push(
                entry
                    .top_logprobs
                    .into_iter()
                    .map(|t| (t.token_id, t.logprob))
                    .collect(),
            );
        }
        Some(scores)
    }
}

/// The scores of `ids`, one entry per id (empty when the engine sent none). The engine's
/// entries are matched from the end: a message may score more ids than it carries (a
/// cumulative complete), never the ids of a later one; an id the engine did not score
/// (vLLM leaves out a position it has no score for) gets `None`.
pub(super) fn aligned(ids: &[u32], scores: Option<Scores>) -> Vec<Option<TokenLogprob>> {
    let Some(scores) = scores else {
        return Vec::new();
    };
    let len = scores.values.len().min(scores.ids.len());
    if len == 0 {
        return Vec::new();
    }
    // Top lists run beside the entries, or are absent when none were asked.
    let mut tops: Vec<Vec<(u32, f32)>> = scores.top.into_iter().take(len).collect();
    tops.resize(len, Vec::new());
    let mut next = len.saturating_sub(ids.len());
    ids.iter()
        .map(|&id| {
            if next < len && scores.ids[next] == id {
                let entry = TokenLogprob {
                    logprob: scores.values[next],
                    top: std::mem::take(&mut tops[next]),
                };
                next += 1;
                Some(entry)
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(ids: &[u32]) -> Scores {
        Scores {
            values: ids.iter().map(|&id| -(id as f32)).collect(),
            ids: ids.to_vec(),
            top: ids
                .iter()
                .map(|&id| vec![(id, -(id as f32)), (id + 1, -9.0)])
                .collect(),
        }
    }

    #[test]
    fn scores_align_with_the_ids_of_their_message() {
        assert!(aligned(&[1, 2], None).is_empty());
        let same = aligned(&[1, 2], Some(scores(&[1, 2])));
        assert_eq!(same.len(), 2);
        assert_eq!(same[1].as_ref().unwrap().logprob, -2.0);
        assert_eq!(same[1].as_ref().unwrap().top, vec![(2, -2.0), (3, -9.0)]);
        // A cumulative complete: the last entries are this message's.
        let tail = aligned(&[7], Some(scores(&[5, 6, 7])));
        assert_eq!(
            tail,
            vec![Some(TokenLogprob {
                logprob: -7.0,
                top: vec![(7, -7.0), (8, -9.0)]
            })]
        );
        // A position the engine did not score.
        let gap = aligned(&[4, 5, 6], Some(scores(&[4, 6])));
        assert!(gap[0].is_some() && gap[1].is_none() && gap[2].is_some());
        let gap = aligned(&[4, 5], Some(scores(&[5])));
        assert!(gap[0].is_none() && gap[1].is_some());
    }

    #[test]
    fn tensorrt_llm_entries_become_parallel_lists() {
        assert!(Scores::of_tokens(Vec::new()).is_none());
        let entries = vec![
            trtllm::TokenLogprob {
                token_id: 4,
                logprob: -0.25,
                top_logprobs: vec![trtllm::TopLogprob {
                    token_id: 4,
                    logprob: -0.25,
                }],
            },
            trtllm::TokenLogprob {
                token_id: 5,
                logprob: -1.0,
                top_logprobs: Vec::new(),
            },
        ];
        let lined = aligned(&[4, 5], Scores::of_tokens(entries));
        assert_eq!(lined[0].as_ref().unwrap().top, vec![(4, -0.25)]);
        assert_eq!(lined[1].as_ref().unwrap().logprob, -1.0);
    }
}
