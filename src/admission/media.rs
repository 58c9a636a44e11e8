//! `--multimodal-max-inflight-bytes`: a budget on the media bytes of requests in flight.
//!
//! Images, audio and video ride inside request bodies as base64 or URLs; a few large ones
//! can pin more memory in the gateway and the engines than thousands of text prompts. A
//! request whose body carries media holds its body size against the budget for its whole
//! life. The budget is a FIFO semaphore counted in KiB (so any budget fits its permit
//! count): a request larger than the whole budget is refused at once, one that finds the
//! budget full waits up to `--queue-timeout-secs`.

use std::sync::Arc;
use std::time::Duration;

use memchr::memmem;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: permits are KiB.
const UNIT: u64 = 1024;

/// Why a request's media was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaRefusal {
    /// Larger than the whole budget.
    TooLarge,
    /// The budget stayed full for the whole wait.
    Full,
}

#[derive(Debug)]
pub struct MediaBudget {
    limit: u64,
    units: Arc<Semaphore>,
    wait: Duration,
}

impl MediaBudget {
    pub fn new(limit: u64, wait: Duration) -> MediaBudget {
        let units = usize::try_from(limit.div_ceil(UNIT))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        MediaBudget {
            limit,
            units: Arc::new(Semaphore::new(units)),
            wait,
        }
    }

    /// The budget in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Holds `bytes` of the budget until the returned permit drops.
    pub async fn charge(&self, bytes: u64) -> Result<OwnedSemaphorePermit, MediaRefusal> {
        if bytes > self.limit {
            return Err(MediaRefusal::TooLarge);
        }
        let units =
            u32::try_from(bytes.div_ceil(UNIT).max(1)).map_err(|_| MediaRefusal::TooLarge)?;
        if let Ok(permit) = self.units.clone().try_acquire_many_owned(units) {
            return Ok(permit);
        }
        match tokio::time::timeout(self.wait, self.units.clone().acquire_many_owned(units)).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(MediaRefusal::Full),
        }
    }
}

/// Markers of media content parts in the request shapes the gateway serves: OpenAI chat
/// (`image_url`, `input_audio`, `video_url`), Responses (`input_image`, `input_file`) and
/// Messages (`"type":"image"`/`"document"` blocks).
const MARKERS: [&[u8]; 6] = [
    b"\"image_url\"",
    b"\"input_audio\"",
    b"\"video_url\"",
    b"\"input_image\"",
    b"\"input_file\"",
    b"\"audio_url\"",
];

/// Anthropic content block types that carry media, matched after a `"type"` key.
const BLOCK_TYPES: [&[u8]; 2] = [b"\"image\"", b"\"document\""];

/// Whether a JSON request body carries media parts. A byte scan rather than a parse: a
/// false positive (the marker inside a prompt's text) only charges the budget for a text
/// request, never lets media through uncounted.
pub fn carries_media(body: &[u8]) -> bool {
    if MARKERS.iter().any(|m| memmem::find(body, m).is_some()) {
        return true;
    }
    let finder = memmem::Finder::new(b"\"type\"");
    finder.find_iter(body).any(|at| {
        let rest = &body[at + 6..];
        let rest = skip_ws(rest);
        let Some(rest) = rest.strip_prefix(b":") else {
            return false;
        };
        let rest = skip_ws(rest);
        BLOCK_TYPES.iter().any(|t| rest.starts_with(t))
    })
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_media_in_each_api_shape() {
        let with = [
            r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}"#,
            r#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type": "image","source":{"type":"base64","data":"AAAA"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type" :
                "document","source":{"type":"base64","data":"JVBERi0"}}]}]}"#,
        ];
        for body in with {
            assert!(carries_media(body.as_bytes()), "{body}");
        }
        let without = [
            r#"{"messages":[{"role":"user","content":"describe an image"}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"image"}]}]}"#,
            r#"{"prompt":"the \"type\" key"}"#,
            "",
            "\"type\"",
        ];
        for body in without {
            assert!(!carries_media(body.as_bytes()), "{body}");
        }
    }

    #[tokio::test]
    async fn the_budget_refuses_oversize_and_waits_for_room() {
        let budget = MediaBudget::new(10 * 1024, Duration::from_millis(50));
        assert_eq!(
            budget.charge(10 * 1024 + 1).await.err(),
            Some(MediaRefusal::TooLarge)
        );
        let held = budget.charge(8 * 1024).await.unwrap();
        assert_eq!(
            budget.charge(4 * 1024).await.err(),
            Some(MediaRefusal::Full)
        );
        drop(held);
        assert!(budget.charge(4 * 1024).await.is_ok());
        // A small body still takes one unit.
        assert!(budget.charge(1).await.is_ok());
    }
}
