//! vLLM's engine-core messages, as its msgspec structs put them on the wire (vLLM 0.33,
//! `vllm/v1/engine/__init__.py`, `core.py`, `engine/utils.py`, `sampling_params.py`):
//! positional arrays for `EngineCoreRequest`, `EngineCoreOutputs` and `EngineCoreOutput`
//! (`array_like=True`), maps for the handshake, the registration and `SamplingParams`.
//!
//! Decoding is lenient the way msgspec is: extra trailing array elements and unknown map
//! keys are skipped (vLLM appends fields between releases), missing optional ones default.
//! Encoding writes what vLLM's own front-end writes: every one of the request's 22
//! positions, and the sampling map in declaration order without the fields at their
//! defaults (`omit_defaults=True`), so the bytes equal msgspec's.

use super::msgpack::{Kind, Malformed, Reader, Result, Writer};

/// `EngineCoreRequestType` (`vllm/v1/engine/__init__.py`): the first frame after the
/// engine's identity on the input socket.
pub const ADD: u8 = 0x00;
pub const ABORT: u8 = 0x01;

/// `EngineCoreProc.ENGINE_CORE_DEAD`: sent alone on the output socket when the engine's
/// busy loop dies (`core.py :: EngineCoreProc._send_engine_dead`).
pub const ENGINE_CORE_DEAD: &[u8] = b"ENGINE_CORE_DEAD";

/// msgspec's extension type for a small array's raw bytes (`serial_utils.py ::
/// CUSTOM_TYPE_RAW_VIEW`).
const EXT_RAW_VIEW: i8 = 3;

/// A message on the handshake socket (`core.py :: EngineCoreProc.startup_handshake`,
/// `_perform_handshake`).
#[derive(Debug, PartialEq, Eq)]
pub enum Handshake {
    /// Sent before the model loads; the gateway answers with INIT.
    Hello,
    /// Sent once the engine loaded, registered and can take requests.
    Ready,
    /// A status this gateway does not know.
    Other(String),
}

/// Reads a handshake map's `status`.
pub fn handshake(payload: &[u8]) -> Result<Handshake> {
    let mut r = Reader::new(payload);
    let mut status = None;
    for _ in 0..r.map()? {
        if r.peek()? == Kind::Str && r.str()? == "status" {
            status = Some(r.str()?);
        } else {
            r.skip()?;
        }
    }
    Ok(
        match status.ok_or(Malformed("handshake without a status"))? {
            "HELLO" => Handshake::Hello,
            "READY" => Handshake::Ready,
            other => Handshake::Other(other.to_owned()),
        },
    )
}

/// INIT, `EngineHandshakeMetadata` (`engine/utils.py`): where the engine's input and
/// output sockets dial, no coordinator, and an empty `parallel_config` (headless engines
/// have theirs from their own command line, as vLLM's Rust front-end sends it).
pub fn init(input: &str, output: &str) -> Vec<u8> {
    let mut w = Writer::with_capacity(160 + input.len() + output.len());
    w.map(2);
    w.str("addresses");
    w.map(5);
    w.str("inputs");
    w.array(1);
    w.str(input);
    w.str("outputs");
    w.array(1);
    w.str(output);
    w.str("coordinator_input");
    w.nil();
    w.str("coordinator_output");
    w.nil();
    w.str("frontend_stats_publish_address");
    w.nil();
    w.str("parallel_config");
    w.map(0);
    w.buf
}

/// What an engine's registration (`EngineCoreReadyResponse`, a map, sent once on the
/// input socket) says that the gateway uses.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Registration {
    pub max_model_len: Option<u32>,
    pub data_parallel_rank: Option<u32>,
    pub vllm_version: Option<String>,
}

/// Reads a registration; an empty payload (engines before vLLM's "Simplify API server
/// handshake") says nothing.
pub fn registration(payload: &[u8]) -> Result<Registration> {
    let mut found = Registration::default();
    if payload.is_empty() {
        return Ok(found);
    }
    let mut r = Reader::new(payload);
    for _ in 0..r.map()? {
        if r.peek()? != Kind::Str {
            r.skip()?;
            r.skip()?;
            continue;
        }
        let key = r.str()?;
        if r.nil()? {
            continue;
        }
        match key {
            "max_model_len" => found.max_model_len = Some(r.u32()?),
            "data_parallel_rank" => found.data_parallel_rank = Some(r.u32()?),
            "vllm_version" => found.vllm_version = Some(r.str()?.to_owned()),
            _ => r.skip()?,
        }
    }
    Ok(found)
}

/// The sampling part of a request, in `SamplingParams`' terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling<'a> {
    pub temperature: f64,
    pub top_p: f64,
    /// 0: off (vLLM's default).
    pub top_k: u32,
    pub min_p: f64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub repetition_penalty: f64,
    pub seed: Option<i64>,
    pub stop_token_ids: &'a [u32],
    pub ignore_eos: bool,
    pub max_tokens: u32,
    pub logprobs: Option<u32>,
    /// The id whose generation ends the request; `None` with `ignore_eos`.
    pub eos_token_id: Option<u32>,
    /// EOS and stop ids, which `min_tokens` masks (`_all_stop_token_ids`).
    pub all_stop_token_ids: &'a [u32],
}

/// One `EngineCoreRequest` to add.
#[derive(Clone, Debug, PartialEq)]
pub struct Request<'a> {
    pub request_id: &'a str,
    pub prompt: &'a [u32],
    pub sampling: Sampling<'a>,
    /// Wall-clock seconds (`time.time()`), for the engine's statistics only.
    pub arrival_time: f64,
}

/// `EngineCoreRequest`: all 22 positions, as vLLM's front-end sends them (msgspec writes
/// every position of an `array_like` struct).
pub fn add(request: &Request<'_>) -> Vec<u8> {
    let mut w = Writer::with_capacity(128 + request.prompt.len() * 3);
    w.array(22);
    w.str(request.request_id);
    w.array(request.prompt.len());
    for id in request.prompt {
        w.uint(u64::from(*id));
    }
    w.nil(); // mm_features
    sampling(&mut w, &request.sampling);
    w.nil(); // pooling_params
    w.f64(request.arrival_time);
    w.nil(); // lora_request
    w.nil(); // cache_salt
    w.nil(); // data_parallel_rank: the gateway picked the engine itself
    w.nil(); // prompt_embeds
    w.nil(); // prompt_is_token_ids
    w.uint(0); // client_index: the one output socket INIT named
    w.uint(0); // current_wave: no coordinated (MoE) data parallelism
    w.uint(0); // priority
    w.nil(); // trace_headers
    w.bool(false); // resumable
    w.nil(); // external_req_id
    w.nil(); // reasoning_ended
    w.nil(); // reasoning_parser_kwargs
    w.bool(false); // abort_immediately
    w.nil(); // session_id
    w.nil(); // kv_hints
    w.buf
}

/// `SamplingParams` as msgspec writes it (`omit_defaults=True`, a map, fields in
/// declaration order), the defaults being vLLM's.
fn sampling(w: &mut Writer, s: &Sampling<'_>) {
    enum V<'v> {
        F(f64),
        U(u64),
        I(i64),
        B(bool),
        Ids(&'v [u32]),
    }
    let fields: [(&str, Option<V<'_>>); 13] = [
        (
            "presence_penalty",
            (s.presence_penalty != 0.0).then_some(V::F(s.presence_penalty)),
        ),
        (
            "frequency_penalty",
            (s.frequency_penalty != 0.0).then_some(V::F(s.frequency_penalty)),
        ),
        (
            "repetition_penalty",
            (s.repetition_penalty != 1.0).then_some(V::F(s.repetition_penalty)),
        ),
        (
            "temperature",
            (s.temperature != 1.0).then_some(V::F(s.temperature)),
        ),
        ("top_p", (s.top_p != 1.0).then_some(V::F(s.top_p))),
        ("top_k", (s.top_k != 0).then_some(V::U(u64::from(s.top_k)))),
        ("min_p", (s.min_p != 0.0).then_some(V::F(s.min_p))),
        ("seed", s.seed.map(V::I)),
        (
            "stop_token_ids",
            (!s.stop_token_ids.is_empty()).then_some(V::Ids(s.stop_token_ids)),
        ),
        ("ignore_eos", s.ignore_eos.then_some(V::B(true))),
        // Always written: left out, vLLM reads its default of 16.
        ("max_tokens", Some(V::U(u64::from(s.max_tokens)))),
        ("logprobs", s.logprobs.map(|k| V::U(u64::from(k)))),
        (
            "_eos_token_id",
            s.eos_token_id.map(|id| V::U(u64::from(id))),
        ),
    ];
    let all_stop = !s.all_stop_token_ids.is_empty();
    let present = fields.iter().filter(|(_, v)| v.is_some()).count() + usize::from(all_stop);
    w.map(present);
    for (key, value) in fields {
        let Some(value) = value else { continue };
        w.str(key);
        match value {
            V::F(f) => w.f64(f),
            V::U(u) => w.uint(u),
            V::I(i) => w.int(i),
            V::B(b) => w.bool(b),
            V::Ids(ids) => {
                w.array(ids.len());
                for id in ids {
                    w.uint(u64::from(*id));
                }
            }
        }
    }
    if all_stop {
        w.str("_all_stop_token_ids");
        w.array(s.all_stop_token_ids.len());
        for id in s.all_stop_token_ids {
            w.uint(u64::from(*id));
        }
    }
}

/// ABORT's payload: the ids to stop (`AsyncMPClient.abort_requests_async`).
pub fn abort(request_id: &str) -> Vec<u8> {
    let mut w = Writer::with_capacity(8 + request_id.len());
    w.array(1);
    w.str(request_id);
    w.buf
}

/// `FinishReason` (`vllm/v1/engine/__init__.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
    Abort,
    Error,
    Repetition,
}

impl Finish {
    fn from_wire(n: i64) -> Result<Finish> {
        Ok(match n {
            0 => Finish::Stop,
            1 => Finish::Length,
            2 => Finish::Abort,
            3 => Finish::Error,
            4 => Finish::Repetition,
            _ => return Err(Malformed("unknown finish reason")),
        })
    }
}

/// A request-scoped error (`vllm/outputs.py :: RequestError`), sent with `Finish::Error`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RequestError {
    pub code: String,
    pub message: String,
}

/// A generated position's log probabilities: the sampled token's, then the engine's top
/// alternatives (`LogprobsLists`, column 0 being the sampled token).
#[derive(Debug, PartialEq)]
pub struct Position {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One request's step (`EngineCoreOutput`).
#[derive(Debug, Default, PartialEq)]
pub struct Output<'a> {
    pub request_id: &'a str,
    pub new_token_ids: Vec<u32>,
    /// One entry per new token when log probabilities were asked; empty otherwise.
    pub logprobs: Vec<Position>,
    pub finish: Option<Finish>,
    pub error: Option<RequestError>,
    /// `prefill_stats.num_prompt_tokens`, on the first output after the prefill.
    pub prompt_tokens: Option<u32>,
}

/// One message on the output socket (`EngineCoreOutputs`).
#[derive(Debug, Default, PartialEq)]
pub struct Outputs<'a> {
    /// The rank that sent it (the engine's output thread stamps it).
    pub engine_index: u32,
    pub outputs: Vec<Output<'a>>,
}

/// Reads an output message: `frames[0]` is the msgpack, later frames the out-of-band
/// buffers its arrays may point at.
pub fn outputs<'a>(frames: &'a [Vec<u8>]) -> Result<Outputs<'a>> {
    let payload = frames.first().ok_or(Malformed("no frames"))?;
    let mut r = Reader::new(payload);
    let fields = r.array()?;
    let mut found = Outputs::default();
    for field in 0..fields {
        match field {
            0 => found.engine_index = r.u32()?,
            1 => {
                if r.nil()? {
                    continue;
                }
                let n = r.array()?;
                found.outputs.reserve(n);
                for _ in 0..n {
                    found.outputs.push(output(&mut r, frames)?);
                }
            }
            _ => r.skip()?,
        }
    }
    Ok(found)
}

fn output<'a>(r: &mut Reader<'a>, frames: &'a [Vec<u8>]) -> Result<Output<'a>> {
    let fields = r.array()?;
    if fields < 2 {
        return Err(Malformed("an output without its token ids"));
    }
    let mut found = Output {
        request_id: r.str()?,
        ..Output::default()
    };
    let n = r.array()?;
    found.new_token_ids.reserve(n);
    for _ in 0..n {
        found.new_token_ids.push(r.u32()?);
    }
    for field in 2..fields {
        if r.nil()? {
            continue;
        }
        match field {
            2 => found.logprobs = logprobs(r, frames)?,
            5 => found.finish = Some(Finish::from_wire(r.int()?)?),
            11 => found.prompt_tokens = prefill_prompt_tokens(r)?,
            18 => found.error = Some(request_error(r)?),
            _ => r.skip()?,
        }
    }
    Ok(found)
}

/// `prefill_stats.num_prompt_tokens`.
fn prefill_prompt_tokens(r: &mut Reader<'_>) -> Result<Option<u32>> {
    let mut found = None;
    for _ in 0..r.map()? {
        if r.peek()? == Kind::Str && r.str()? == "num_prompt_tokens" {
            if !r.nil()? {
                found = Some(r.u32()?);
            }
        } else {
            r.skip()?;
        }
    }
    Ok(found)
}

fn request_error(r: &mut Reader<'_>) -> Result<RequestError> {
    let mut found = RequestError::default();
    for _ in 0..r.map()? {
        let key = if r.peek()? == Kind::Str { r.str()? } else { "" };
        match key {
            "code" if r.peek()? == Kind::Str => found.code = r.str()?.to_owned(),
            "message" if r.peek()? == Kind::Str => found.message = r.str()?.to_owned(),
            _ => r.skip()?,
        }
    }
    Ok(found)
}

/// `LogprobsLists`: `[token ids (positions × k+1), log probabilities (positions × k+1),
/// sampled ranks, cumulative counts | nil]`, each an ndarray.
fn logprobs<'a>(r: &mut Reader<'a>, frames: &'a [Vec<u8>]) -> Result<Vec<Position>> {
    let fields = r.array()?;
    if fields < 2 {
        return Err(Malformed("logprobs without ids and values"));
    }
    let ids = ndarray(r, frames)?;
    let values = ndarray(r, frames)?;
    for _ in 2..fields {
        r.skip()?;
    }
    let (rows, cols) = ids.rows_cols()?;
    if values.rows_cols()? != (rows, cols) || cols == 0 {
        return Err(Malformed("logprob arrays of different shapes"));
    }
    let mut positions = Vec::with_capacity(rows);
    for row in 0..rows {
        let at = row * cols;
        let logprob = values.float(at)? as f32;
        let mut top = Vec::with_capacity(cols - 1);
        for col in 1..cols {
            let id = u32::try_from(ids.int(at + col)?).map_err(|_| Malformed("token id"))?;
            top.push((id, values.float(at + col)? as f32));
        }
        positions.push(Position { logprob, top });
    }
    Ok(positions)
}

/// A numpy array as msgspec sends it (`serial_utils.py :: MsgpackEncoder._encode_ndarray`):
/// `[dtype, shape, data]`, the data inline (extension 3) or the index of an out-of-band
/// frame.
struct NdArray<'a> {
    /// `i` (signed int) or `f` (float).
    kind: u8,
    width: usize,
    shape: Vec<usize>,
    data: &'a [u8],
}

fn ndarray<'a>(r: &mut Reader<'a>, frames: &'a [Vec<u8>]) -> Result<NdArray<'a>> {
    if r.array()? != 3 {
        return Err(Malformed("an ndarray is [dtype, shape, data]"));
    }
    let (kind, width) = match r.str()? {
        "<i4" | "int32" => (b'i', 4),
        "<i8" | "int64" => (b'i', 8),
        "<f4" | "float32" => (b'f', 4),
        "<f8" | "float64" => (b'f', 8),
        _ => return Err(Malformed("an ndarray dtype the gateway does not read")),
    };
    let dims = r.array()?;
    if dims > 2 {
        return Err(Malformed("an ndarray of more than two dimensions"));
    }
    let mut shape = Vec::with_capacity(dims);
    for _ in 0..dims {
        shape.push(r.u32()? as usize);
    }
    let data = match r.peek()? {
        Kind::Ext => match r.ext()? {
            (EXT_RAW_VIEW, bytes) => bytes,
            _ => return Err(Malformed("an ndarray in an unknown extension")),
        },
        Kind::Int => {
            let index = usize::try_from(r.int()?).map_err(|_| Malformed("frame index"))?;
            frames
                .get(index)
                .filter(|_| index > 0)
                .ok_or(Malformed("an ndarray in a frame that was not sent"))?
        }
        Kind::Bin => r.bytes()?,
        _ => return Err(Malformed("ndarray data")),
    };
    let count = shape
        .iter()
        .try_fold(1usize, |n, d| n.checked_mul(*d))
        .ok_or(Malformed("ndarray shape"))?;
    if count.checked_mul(width) != Some(data.len()) {
        return Err(Malformed("ndarray data does not match its shape"));
    }
    Ok(NdArray {
        kind,
        width,
        shape,
        data,
    })
}

impl NdArray<'_> {
    fn rows_cols(&self) -> Result<(usize, usize)> {
        match self.shape[..] {
            [rows, cols] => Ok((rows, cols)),
            [rows] => Ok((rows, 1)),
            _ => Err(Malformed("logprobs are one row per position")),
        }
    }

    fn raw(&self, at: usize) -> &[u8] {
        &self.data[at * self.width..(at + 1) * self.width]
    }

    fn int(&self, at: usize) -> Result<i64> {
        if self.kind != b'i' {
            return Err(Malformed("expected integer token ids"));
        }
        let raw = self.raw(at);
        Ok(match self.width {
            4 => i64::from(i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
            _ => i64::from_le_bytes(raw.try_into().map_err(|_| Malformed("width"))?),
        })
    }

    fn float(&self, at: usize) -> Result<f64> {
        if self.kind != b'f' {
            return Err(Malformed("expected float log probabilities"));
        }
        let raw = self.raw(at);
        Ok(match self.width {
            4 => f64::from(f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
            _ => f64::from_le_bytes(raw.try_into().map_err(|_| Malformed("width"))?),
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Bytes from their hex spelling (the test vectors).
    pub(in crate::engine::zmq) fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // The vectors below were written by msgspec 0.22 from structs mirroring vLLM 0.33's
    // (field order and defaults as in `vllm/v1/engine/__init__.py`), not by this code.

    #[test]
    fn reads_hello_and_ready() {
        let hello = hex("83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3");
        assert_eq!(handshake(&hello), Ok(Handshake::Hello));
        let mut w = Writer::with_capacity(32);
        w.map(2);
        w.str("parallel_config_hash");
        w.str("abc");
        w.str("status");
        w.str("READY");
        assert_eq!(handshake(&w.buf), Ok(Handshake::Ready));
        assert!(handshake(&hex("80")).is_err());
    }

    #[test]
    fn init_matches_msgspec() {
        let want = hex(
            "82a961646472657373657385a6696e7075747391b47463703a2f2f3132372e302e302e313a35353535a76f75747075747391b47463703a2f2f3132372e302e302e313a35353536b1636f6f7264696e61746f725f696e707574c0b2636f6f7264696e61746f725f6f7574707574c0be66726f6e74656e645f73746174735f7075626c6973685f61646472657373c0af706172616c6c656c5f636f6e66696780",
        );
        assert_eq!(init("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"), want);
    }

    #[test]
    fn add_matches_msgspec() {
        let want = hex(
            "dc0016a2723193010203c084ab74656d7065726174757265cb0000000000000000aa6d61785f746f6b656e7304ad5f656f735f746f6b656e5f696402b35f616c6c5f73746f705f746f6b656e5f6964739102c0cb0000000000000000c0c0c0c0c0000000c0c2c0c0c0c2c0c0",
        );
        let request = Request {
            request_id: "r1",
            prompt: &[1, 2, 3],
            sampling: Sampling {
                temperature: 0.0,
                top_p: 1.0,
                top_k: 0,
                min_p: 0.0,
                presence_penalty: 0.0,
                frequency_penalty: 0.0,
                repetition_penalty: 1.0,
                seed: None,
                stop_token_ids: &[],
                ignore_eos: false,
                max_tokens: 4,
                logprobs: None,
                eos_token_id: Some(2),
                all_stop_token_ids: &[2],
            },
            arrival_time: 0.0,
        };
        assert_eq!(add(&request), want);
        assert_eq!(abort("r1"), hex("91a27231"));
    }

    #[test]
    fn reads_outputs_with_trailing_fields() {
        let frames = vec![hex(
            "990091dc0013a272319107c0c0c001c0c0c0c0c0c0c000c0c0c0c0c0c0cb405ee00000000000c0c0c0c0a764656661756c74",
        )];
        let read = outputs(&frames).unwrap();
        assert_eq!(read.engine_index, 0);
        assert_eq!(read.outputs.len(), 1);
        let out = &read.outputs[0];
        assert_eq!(out.request_id, "r1");
        assert_eq!(out.new_token_ids, [7]);
        assert_eq!(out.finish, Some(Finish::Length));
        assert_eq!(out.error, None);
    }

    #[test]
    fn reads_registration_leniently() {
        let mut w = Writer::with_capacity(64);
        w.map(4);
        w.str("max_model_len");
        w.uint(2048);
        w.str("num_gpu_blocks");
        w.uint(1000);
        w.str("vllm_version");
        w.str("0.33.0");
        w.str("dp_stats_address");
        w.nil();
        let read = registration(&w.buf).unwrap();
        assert_eq!(read.max_model_len, Some(2048));
        assert_eq!(read.vllm_version.as_deref(), Some("0.33.0"));
        assert_eq!(registration(&[]), Ok(Registration::default()));
    }

    /// One output with errors, prefill stats and inline logprobs, as the engine builds
    /// them (`_handle_request_validation_error`, `LogprobsLists` via `_encode_ndarray`).
    #[test]
    fn reads_errors_prefill_stats_and_logprobs() {
        let mut w = Writer::with_capacity(256);
        w.array(3);
        w.uint(1);
        w.array(1);
        w.array(19);
        w.str("r2");
        w.array(1);
        w.uint(5);
        // new_logprobs: 1 position, k = 1.
        w.array(4);
        w.array(3);
        w.str("<i8");
        w.array(2);
        w.uint(1);
        w.uint(2);
        let mut ids = Vec::new();
        ids.extend_from_slice(&5i64.to_le_bytes());
        ids.extend_from_slice(&9i64.to_le_bytes());
        w.buf.extend_from_slice(&[0xc7, 16, 3]);
        w.buf.extend_from_slice(&ids);
        w.array(3);
        w.str("<f4");
        w.array(2);
        w.uint(1);
        w.uint(2);
        w.uint(1); // out of band: frame 1
        w.array(3);
        w.str("<i8");
        w.array(1);
        w.uint(1);
        w.buf.extend_from_slice(&[0xc7, 8, 3]);
        w.buf.extend_from_slice(&0i64.to_le_bytes());
        w.nil();
        w.nil(); // prompt logprobs
        w.nil(); // pooling
        w.uint(3); // ERROR
        w.nil();
        w.nil();
        w.nil();
        w.nil();
        w.nil();
        w.map(2);
        w.str("num_prompt_tokens");
        w.uint(12);
        w.str("num_cached_tokens");
        w.uint(0);
        for _ in 12..18 {
            w.nil();
        }
        w.map(3);
        w.str("code");
        w.str("validation_error");
        w.str("message");
        w.str("bad");
        w.str("retryable");
        w.bool(false);
        w.nil(); // scheduler_stats
        let mut values = Vec::new();
        values.extend_from_slice(&(-0.5f32).to_le_bytes());
        values.extend_from_slice(&(-1.5f32).to_le_bytes());
        let frames = vec![w.buf, values];
        let read = outputs(&frames).unwrap();
        assert_eq!(read.engine_index, 1);
        let out = &read.outputs[0];
        assert_eq!(out.finish, Some(Finish::Error));
        assert_eq!(out.prompt_tokens, Some(12));
        assert_eq!(out.error.as_ref().unwrap().code, "validation_error");
        assert_eq!(
            out.logprobs,
            [Position {
                logprob: -0.5,
                top: vec![(9, -1.5)]
            }]
        );
        // The frame index must name a frame that came.
        assert!(outputs(&frames[..1]).is_err());
    }
}
