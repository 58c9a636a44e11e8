//! vLLM's engine-core messages as the gateway reads them off ZMQ (`tollgate::engine::zmq`):
//! any bytes on the output, handshake or input sockets are read without a panic, without an
//! allocation sized by a length the frame cannot hold, and the same way every time; a
//! request the gateway writes reads back as the engine would read it. The first byte says
//! how many bytes of the rest form a second, out-of-band frame (an ndarray's buffer).

use tollgate::engine::zmq::msgpack::Reader;
use tollgate::engine::zmq::wire;

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(split).min(rest.len());
    let (aux, payload) = rest.split_at(cut);
    let frames = vec![payload.to_vec(), aux.to_vec()];
    let first = wire::outputs(&frames);
    assert_eq!(
        first,
        wire::outputs(&frames),
        "the same bytes read the same"
    );
    if let Ok(outputs) = &first {
        for out in &outputs.outputs {
            assert!(
                out.new_token_ids.len() <= payload.len(),
                "ids within the frame"
            );
            for position in &out.logprobs {
                assert!(position.top.len() <= aux.len() + payload.len());
            }
        }
    }
    let _ = wire::handshake(payload);
    let _ = wire::registration(payload);
    let mut reader = Reader::new(payload);
    while !reader.done() && reader.skip().is_ok() {}

    // What the gateway writes, the engine reads back: ids and strings survive the trip.
    let text = String::from_utf8_lossy(payload);
    let ids: Vec<u32> = payload.iter().map(|b| u32::from(*b) * 997).collect();
    let request = wire::Request {
        request_id: &text,
        prompt: &ids,
        sampling: wire::Sampling {
            temperature: f64::from(split) / 128.0,
            top_p: 1.0,
            top_k: u32::from(split),
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: Some(-i64::from(split)),
            stop_token_ids: &ids[..ids.len().min(3)],
            ignore_eos: split % 2 == 0,
            max_tokens: u32::from(split) + 1,
            logprobs: None,
            eos_token_id: Some(2),
            all_stop_token_ids: &[2],
        },
        arrival_time: 0.0,
    };
    let encoded = wire::add(&request);
    let mut r = Reader::new(&encoded);
    assert_eq!(r.array(), Ok(22));
    assert_eq!(r.str(), Ok(text.as_ref()));
    assert_eq!(r.array(), Ok(ids.len()));
    for id in &ids {
        assert_eq!(r.u32(), Ok(*id));
    }
    while !r.done() {
        r.skip().expect("the request the gateway wrote reads back");
    }
}
