//! Admission control (spec 2 "Limits", spec 3 "HTTP layer"): how many inference requests
//! run at once, how fast they may start, and how many media bytes they may hold.
//!
//! - `--max-concurrent-requests N`: a request holds one of N tokens for its whole life,
//!   streaming included (the token rides on the response body and returns when the last
//!   byte is sent or the client goes away).
//! - `--rate-limit-tokens-per-second R`: requests start at most R per second on average,
//!   with a burst of one second's worth ([`rate`]).
//! - A request that cannot start at once waits in one FIFO queue of `--queue-size` seats
//!   (100) for at most `--queue-timeout-secs` (60): a full queue is 429
//!   `admission_queue_full`, the end of the wait 503 `admission_queue_timeout`, and
//!   `--queue-size 0` answers 429 at once. A client that goes away while queued drops its
//!   wait, which gives its seat back at once (the waits are cancel-safe).
//! - `--multimodal-max-inflight-bytes`: [`media`].
//! - `--max-buffered-request-total-bytes`: [`body_budget`], the request-body bytes the
//!   gateway holds at once.
//!
//! With none of these set, [`Admission::admit`] is one branch and an empty ticket.

pub mod body_budget;
pub mod media;
mod rate;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::http::error::GatewayError;
use body_budget::BodyBudget;
use media::{MediaBudget, MediaRefusal};
use rate::Rate;

/// The admission flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionConfig {
    /// `--max-concurrent-requests`: admission tokens; `None` is no limit.
    pub max_concurrent: Option<usize>,
    /// `--queue-size`: seats in the admission queue (0: no queue).
    pub queue_size: usize,
    /// `--queue-timeout-secs`: longest wait in the queue.
    pub queue_timeout: Duration,
    /// `--rate-limit-tokens-per-second`: average admissions per second; `None` is no limit.
    pub rate_per_second: Option<f64>,
    /// `--multimodal-max-inflight-bytes`: media bytes in flight; `None` is no budget.
    pub multimodal_max_inflight_bytes: Option<u64>,
    /// `--max-buffered-request-total-bytes`: request-body bytes held at once.
    pub max_buffered_request_total_bytes: u64,
    /// `--pd-admission-wait-secs`: longest wait of a gRPC prefill/decode dispatch for
    /// decode rooms (the `pd_admission` stage).
    pub pd_admission_wait: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> AdmissionConfig {
        AdmissionConfig {
            max_concurrent: None,
            queue_size: 100,
            queue_timeout: Duration::from_secs(60),
            rate_per_second: None,
            multimodal_max_inflight_bytes: None,
            max_buffered_request_total_bytes: 1024 * 1024 * 1024,
            pd_admission_wait: Duration::from_secs(30),
        }
    }
}

impl AdmissionConfig {
    /// Whether the concurrency/rate limiter runs.
    pub fn limits(&self) -> bool {
        self.max_concurrent.is_some() || self.rate_per_second.is_some()
    }
}

/// The limiter's live figures (`gw_admission_inflight`, `gw_admission_queue_depth`),
/// registered only when the limiter runs.
#[derive(Clone, Debug, Default)]
pub struct AdmissionGauges {
    pub inflight: Gauge,
    pub queue_depth: Gauge,
}

/// What admission reports as it decides, for the metrics layer (which implements it): the
/// rate limiter's verdicts and the refusals by reason. A trait, so admission does not
/// depend on the metrics module that reads its gauges.
pub trait AdmissionEvents {
    /// The rate limiter let a request through (`true`) or turned it away.
    fn rate_limit(&self, allowed: bool);
    /// A request was refused: `full`, `timeout`, `multimodal_too_large`,
    /// `multimodal_inflight`.
    fn admission_rejected(&self, reason: &'static str);
}

/// The gateway's admission state, shared by every data-plane thread.
#[derive(Debug)]
pub struct Admission {
    limits: bool,
    slots: Option<Arc<Semaphore>>,
    rate: Option<Rate>,
    queue_size: usize,
    queue_timeout: Duration,
    /// Requests in the queue (including the one that just found it full, briefly).
    queued: AtomicUsize,
    pub gauges: AdmissionGauges,
    pub media: Option<MediaBudget>,
    /// Request-body bytes held before dispatch, across all requests.
    pub bodies: BodyBudget,
}

/// What an admitted request holds until its response is over.
#[derive(Debug, Default)]
pub struct Ticket {
    /// The admission token; going back to the semaphore is its drop.
    _slot: Option<OwnedSemaphorePermit>,
    media: Option<OwnedSemaphorePermit>,
    /// Set when the request counts in `gw_admission_inflight`.
    inflight: Option<Gauge>,
}

impl Ticket {
    fn holding(slot: Option<OwnedSemaphorePermit>, gauges: &AdmissionGauges) -> Ticket {
        gauges.inflight.inc();
        Ticket {
            _slot: slot,
            media: None,
            inflight: Some(gauges.inflight.clone()),
        }
    }
}

impl Ticket {
    /// Whether the ticket holds nothing to give back (admission control is off), so a
    /// response need not carry it.
    pub fn holds_nothing(&self) -> bool {
        self._slot.is_none() && self.media.is_none() && self.inflight.is_none()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(gauge) = &self.inflight {
            gauge.dec();
        }
    }
}

/// A seat in the queue, given back however the wait ends (admitted, refused, cancelled).
struct Seat<'a> {
    admission: &'a Admission,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        self.admission.queued.fetch_sub(1, Ordering::AcqRel);
        self.admission.gauges.queue_depth.dec();
    }
}

impl Admission {
    pub fn new(config: &AdmissionConfig) -> Admission {
        Admission {
            limits: config.limits(),
            slots: config.max_concurrent.map(|n| Arc::new(Semaphore::new(n))),
            rate: config.rate_per_second.map(Rate::new),
            queue_size: config.queue_size,
            queue_timeout: config.queue_timeout,
            queued: AtomicUsize::new(0),
            gauges: AdmissionGauges::default(),
            media: config
                .multimodal_max_inflight_bytes
                .map(|limit| MediaBudget::new(limit, config.queue_timeout)),
            bodies: BodyBudget::new(config.max_buffered_request_total_bytes),
        }
    }

    /// Whether the concurrency/rate limiter runs (its metric families exist).
    pub fn limits(&self) -> bool {
        self.limits
    }

    /// Admits one inference request, waiting in the queue if it must.
    pub async fn admit(&self, events: &impl AdmissionEvents) -> Result<Ticket, GatewayError> {
        if !self.limits {
            return Ok(Ticket::default());
        }
        let now = Instant::now();
        let started = self
            .rate
            .as_ref()
            .is_none_or(|r| r.reserve(now.into_std(), Duration::ZERO).is_some());
        let slot = match &self.slots {
            Some(slots) if started => match slots.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => return self.queue(events, now, true, false).await,
            },
            Some(_) => return self.queue(events, now, false, false).await,
            None if started => None,
            None => return self.queue(events, now, false, true).await,
        };
        events.rate_limit(true);
        Ok(Ticket::holding(slot, &self.gauges))
    }

    /// The slow path: a seat in the queue, then the rate reservation (unless `rated`) and
    /// the token (unless the limiter has no token count, `no_slots`).
    async fn queue(
        &self,
        events: &impl AdmissionEvents,
        now: Instant,
        rated: bool,
        no_slots: bool,
    ) -> Result<Ticket, GatewayError> {
        if self.queue_size == 0 {
            events.rate_limit(false);
            return Err(GatewayError::AdmissionQueueFull);
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.queue_size {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            events.admission_rejected("full");
            return Err(GatewayError::AdmissionQueueFull);
        }
        self.gauges.queue_depth.inc();
        let _seat = Seat { admission: self };
        let deadline = now + self.queue_timeout;
        let timed_out = || {
            events.admission_rejected("timeout");
            GatewayError::AdmissionQueueTimeout
        };
        if !rated {
            if let Some(rate) = &self.rate {
                let wait = rate
                    .reserve(now.into_std(), self.queue_timeout)
                    .ok_or_else(timed_out)?;
                tokio::time::sleep(wait).await;
            }
        }
        let slot = match &self.slots {
            Some(slots) if !no_slots => {
                match tokio::time::timeout_at(deadline, slots.clone().acquire_owned()).await {
                    Ok(Ok(slot)) => Some(slot),
                    Ok(Err(_)) | Err(_) => return Err(timed_out()),
                }
            }
            _ => None,
        };
        Ok(Ticket::holding(slot, &self.gauges))
    }

    /// Charges a request's media against the budget, if one is set and the body carries
    /// media; the charge rides on the ticket.
    pub async fn charge_media(
        &self,
        ticket: &mut Ticket,
        body: &[u8],
        events: &impl AdmissionEvents,
    ) -> Result<(), GatewayError> {
        let Some(budget) = &self.media else {
            return Ok(());
        };
        if !media::carries_media(body) {
            return Ok(());
        }
        let bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
        match budget.charge(bytes).await {
            Ok(permit) => {
                ticket.media = Some(permit);
                Ok(())
            }
            Err(MediaRefusal::TooLarge) => {
                events.admission_rejected("multimodal_too_large");
                Err(GatewayError::MultimodalTooLarge {
                    limit: budget.limit(),
                })
            }
            Err(MediaRefusal::Full) => {
                events.admission_rejected("multimodal_inflight");
                Err(GatewayError::MultimodalBudgetFull)
            }
        }
    }
}
