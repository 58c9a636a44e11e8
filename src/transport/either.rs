//! One of two futures with the same output, chosen before either is polled.
//!
//! A function that picks a branch and returns that branch's future (instead of an
//! `async fn` awaiting it) adds no future of its own to the request's: no state to build,
//! no frame on every poll, no copy of its arguments. The hot carriers return this.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// Either future; polling it polls the one chosen.
    #[project = EitherProj]
    pub enum Either<A, B> {
        Left { #[pin] future: A },
        Right { #[pin] future: B },
    }
}

impl<A, B> Either<A, B> {
    pub fn left(future: A) -> Self {
        Either::Left { future }
    }

    pub fn right(future: B) -> Self {
        Either::Right { future }
    }
}

impl<A, B> Future for Either<A, B>
where
    A: Future,
    B: Future<Output = A::Output>,
{
    type Output = A::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<A::Output> {
        match self.project() {
            EitherProj::Left { future } => future.poll(cx),
            EitherProj::Right { future } => future.poll(cx),
        }
    }
}

/// Names the lifetimes a returned `impl Future` borrows from: under edition 2021 an
/// opaque return type captures only those named in its bounds, and one bound lifetime
/// cannot stand for several independent ones.
pub trait Captures<T: ?Sized> {}

impl<T: ?Sized, U: ?Sized> Captures<T> for U {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn polls_the_chosen_future() {
        let left: Either<_, std::future::Ready<u8>> = Either::left(async { 1u8 });
        let right: Either<std::future::Ready<u8>, _> = Either::right(async { 2u8 });
        assert_eq!(left.await, 1);
        assert_eq!(right.await, 2);
    }
}
