//! TokenSpeed's scheduler over the same sockets (`--zmq-msgpack`, TokenSpeed f4d8ec6):
//! vLLM's handshake and framing, its own payloads (`runtime/engine/io_struct.py`,
//! `runtime/sampling/sampling_params.py`, `runtime/engine/zmq_wire.py`).
//!
//! - ADD is a tagged positional `TokenizedGenerateReqInput` (the class name first); the
//!   engine accepts any prefix through `stream`, and this writes that prefix, as TokenSpeed's
//!   own tests and SMG's client do. `SamplingParams` is a 29-element array, sent with API
//!   values for the engine's own normalisation to run on decode (`is_normalized` false).
//! - Outputs are columnar, `BatchTokenIDOutSlim`: parallel `rids`, per-step `output_ids`
//!   deltas and finish strings (`""` while running).
//! - There is no request-scoped error message: an invalid request comes back as a bare
//!   `"abort"` with no tokens.

use super::msgpack::{Kind, Malformed, Reader, Result, Writer};
use super::wire::{Finish, Output, Outputs, Position, RequestError};

const ADD_TAG: &str = "TokenizedGenerateReqInput";
const OUT_TAG: &str = "BatchTokenIDOutSlim";

/// `top_k` at or above this is refused by the engine (`_TOP_K_FUSED_MAX`).
pub const TOP_K_MAX: u32 = 128;
/// The most `repetition_penalty` the engine takes.
pub const REPETITION_PENALTY_MAX: f32 = 2.0;
/// Tokens of the window the engine keeps back: a longer prompt kills it
/// (`RequestHandler(max_req_len = max_model_len - 1)`, less one for the first output).
pub const WINDOW_RESERVE: u32 = 2;

/// The sampling part of an ADD, in TokenSpeed's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling<'a> {
    pub max_new_tokens: u32,
    /// Ids that end the generation besides the model's own EOS, which the engine adds.
    pub stop_token_ids: &'a [u32],
    pub temperature: f64,
    pub top_p: f64,
    /// `None`: off (`-1` on the wire; vLLM's `0` is refused here).
    pub top_k: Option<u32>,
    pub min_p: f64,
    pub frequency_penalty: f64,
    pub presence_penalty: f64,
    pub repetition_penalty: f64,
    pub ignore_eos: bool,
}

/// One ADD: `[tag, rid, http_worker_ipc, input_text, input_ids, sampling_params,
/// return_logprob, logprob_start_len, top_logprobs_num, token_ids_logprob, stream]`.
pub fn add(rid: &str, prompt: &[u32], s: &Sampling<'_>, logprob: bool) -> Vec<u8> {
    let mut w = Writer::with_capacity(256 + prompt.len() * 3);
    w.array(11);
    w.str(ADD_TAG);
    w.str(rid);
    w.nil(); // http_worker_ipc
    w.nil(); // input_text
    w.array(prompt.len());
    for id in prompt {
        w.uint(u64::from(*id));
    }
    sampling(&mut w, s);
    w.bool(logprob); // return_logprob: the sampled token's only
    w.int(-1); // logprob_start_len
    w.uint(0); // top_logprobs_num
    w.nil(); // token_ids_logprob
    w.bool(true); // stream: every step, not every 50th token
    w.buf
}

fn sampling(w: &mut Writer, s: &Sampling<'_>) {
    w.array(29);
    w.uint(u64::from(s.max_new_tokens));
    w.nil(); // stop: the gateway matches stop strings
    if s.stop_token_ids.is_empty() {
        w.nil();
    } else {
        w.array(s.stop_token_ids.len());
        for id in s.stop_token_ids {
            w.uint(u64::from(*id));
        }
    }
    w.f64(s.temperature);
    w.f64(s.top_p);
    match s.top_k {
        Some(k) => w.uint(u64::from(k)),
        None => w.int(-1),
    }
    w.f64(s.min_p);
    w.f64(s.frequency_penalty);
    w.f64(s.presence_penalty);
    w.f64(s.repetition_penalty);
    w.uint(0); // min_new_tokens
    for _ in 0..4 {
        w.nil(); // json_schema, regex, ebnf, structural_tag
    }
    w.bool(s.ignore_eos);
    w.bool(true); // skip_special_tokens
    w.bool(true); // spaces_between_special_tokens
    w.bool(false); // no_stop_trim
    for _ in 0..6 {
        w.nil(); // thinking_budget, custom_params, stream_interval, logit_bias, seed, logprobs
    }
    w.uint(1); // n: the gateway fans out
    w.nil(); // stop_strs
    w.uint(0); // stop_str_max_len
    w.bool(false); // is_normalized: the engine normalises on decode
}

/// Reads a `BatchTokenIDOutSlim` into the outputs vLLM's decoder gives; `engine_index` is
/// 0 from engines that predate it.
pub fn outputs(payload: &[u8]) -> Result<Outputs<'_>> {
    let mut r = Reader::new(payload);
    let fields = r.array()?;
    if fields < 9 || r.str()? != OUT_TAG {
        return Err(Malformed("not a BatchTokenIDOutSlim"));
    }
    let rids = strings(&mut r)?;
    let n = rids.len();
    let output_ids = columns(&mut r, n, |r| r.u32())?;
    let finishes = column(&mut r, n, |r| r.str())?;
    let prompt_tokens = column(&mut r, n, |r| r.u32())?;
    r.skip()?; // completion_tokens: cumulative; the gateway counts the deltas
    r.skip()?; // cached_tokens
    let values = columns(&mut r, n, |r| r.f64())?;
    r.skip()?; // output_token_logprobs_idx: the sampled ids again
    let engine_index = if fields > 9 { r.u32()? } else { 0 };
    let mut found = Outputs {
        engine_index,
        outputs: Vec::with_capacity(n),
    };
    for (i, request_id) in rids.into_iter().enumerate() {
        let finish = match finishes[i] {
            "" => None,
            "stop" => Some(Finish::Stop),
            "length" => Some(Finish::Length),
            "abort" => Some(Finish::Error),
            _ => return Err(Malformed("unknown finish reason")),
        };
        let logprobs = values.get(i).map_or_else(Vec::new, |column| {
            column
                .iter()
                .map(|v| Position {
                    logprob: *v as f32,
                    top: Vec::new(),
                })
                .collect()
        });
        found.outputs.push(Output {
            request_id,
            new_token_ids: output_ids[i].clone(),
            logprobs,
            error: (finish == Some(Finish::Error)).then(|| RequestError {
                code: String::new(),
                message: "the engine aborted the request (refused or failed)".into(),
            }),
            finish,
            prompt_tokens: Some(prompt_tokens[i]),
        });
    }
    Ok(found)
}

fn strings<'a>(r: &mut Reader<'a>) -> Result<Vec<&'a str>> {
    if r.nil()? {
        return Ok(Vec::new());
    }
    let n = r.array()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.str()?);
    }
    Ok(out)
}

/// A column of one value per request; a column of another length is a protocol error.
fn column<'a, T>(
    r: &mut Reader<'a>,
    n: usize,
    mut read: impl FnMut(&mut Reader<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    if r.array()? != n {
        return Err(Malformed("a ragged output column"));
    }
    (0..n).map(|_| read(r)).collect()
}

/// A column of one list per request.
fn columns<'a, T>(
    r: &mut Reader<'a>,
    n: usize,
    mut read: impl FnMut(&mut Reader<'a>) -> Result<T>,
) -> Result<Vec<Vec<T>>> {
    column(r, n, |r| {
        if r.peek()? == Kind::Nil {
            r.nil()?;
            return Ok(Vec::new());
        }
        let len = r.array()?;
        (0..len).map(|_| read(r)).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::super::wire::tests::hex;
    use super::*;

    // Written by msgspec 0.22 from structs mirroring TokenSpeed f4d8ec6's (the same mirrors
    // reproduce the vectors SMG captured from TokenSpeed's own encoder), not by this code.

    #[test]
    fn add_matches_msgspec() {
        let want = hex("9bb9546f6b656e697a656447656e6572617465526571496e707574a27231c0c093010203dc001d04c0c0cb0000000000000000cb3ff0000000000000ffcb0000000000000000cb0000000000000000cb0000000000000000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c0c0c001c000c2c2ff00c0c3");
        let sampling = Sampling {
            max_new_tokens: 4,
            stop_token_ids: &[],
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            min_p: 0.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repetition_penalty: 1.0,
            ignore_eos: false,
        };
        assert_eq!(add("r1", &[1, 2, 3], &sampling, false), want);
    }

    #[test]
    fn reads_an_output_batch() {
        let payload =
            hex("9ab34261746368546f6b656e49444f7574536c696d91a2723191910791a66c656e6774689103910491009190919000");
        let read = outputs(&payload).unwrap();
        assert_eq!(read.outputs.len(), 1);
        let out = &read.outputs[0];
        assert_eq!(out.request_id, "r1");
        assert_eq!(out.new_token_ids, [7]);
        assert_eq!(out.finish, Some(Finish::Length));
        assert_eq!(out.prompt_tokens, Some(3));
        // An older engine's 9 elements, and a ragged batch.
        let mut old = payload.clone();
        old[0] = 0x99;
        old.pop();
        assert_eq!(outputs(&old).unwrap().outputs[0].new_token_ids, [7]);
        let mut w = Writer::with_capacity(64);
        w.array(10);
        w.str(OUT_TAG);
        w.array(2);
        w.str("a");
        w.str("b");
        w.array(1);
        w.array(0);
        for _ in 0..6 {
            w.array(0);
        }
        w.uint(0);
        assert!(outputs(&w.buf).is_err());
        assert!(outputs(&hex("9a")).is_err());
    }

    #[test]
    fn an_abort_is_the_requests_error() {
        let mut w = Writer::with_capacity(64);
        w.array(10);
        w.str(OUT_TAG);
        w.array(1);
        w.str("r9");
        w.array(1);
        w.array(0);
        w.array(1);
        w.str("abort");
        for _ in 0..3 {
            w.array(1);
            w.uint(0);
        }
        for _ in 0..2 {
            w.array(1);
            w.array(0);
        }
        w.uint(1);
        let read = outputs(&w.buf).unwrap();
        assert_eq!(read.engine_index, 1);
        assert_eq!(read.outputs[0].finish, Some(Finish::Error));
        assert!(read.outputs[0].error.is_some());
    }
}
