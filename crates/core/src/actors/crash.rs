//! The core actors' one test seam: a switch that makes the supervisor or the
//! aggregator stop or panic on demand, so that the tests of
//! [`crate::overseer`] see them restarted. Every `cfg(test)` of it is here:
//! outside this crate's unit tests the [`Switch`] and its [`Orders`] are
//! zero-sized and no order exists, so no production path can send one.

use actix::Addr;

#[cfg(test)]
use super::CoreActor;
use super::{Aggregator, HealthSupervisor};
#[cfg(test)]
pub(crate) use on::Crash;

/// Test-only: a core actor to make stop or panic, and how.
#[cfg(test)]
pub(crate) type Order = (CoreActor, Crash);
/// Outside this crate's tests there is no order: the type has no value.
#[cfg(not(test))]
pub(crate) type Order = std::convert::Infallible;

/// Where the tests send their orders (held by the handle on the actors' thread).
#[derive(Debug)]
pub(crate) struct Switch {
    #[cfg(test)]
    orders: tokio::sync::mpsc::UnboundedSender<Order>,
}

/// The orders sent, read by the actors' thread.
#[derive(Debug)]
pub(crate) struct Orders {
    #[cfg(test)]
    orders: tokio::sync::mpsc::UnboundedReceiver<Order>,
}

/// A switch and the orders it sends.
pub(crate) fn switch() -> (Switch, Orders) {
    #[cfg(test)]
    {
        let (orders, received) = tokio::sync::mpsc::unbounded_channel();
        (Switch { orders }, Orders { orders: received })
    }
    #[cfg(not(test))]
    {
        (Switch {}, Orders {})
    }
}

impl Switch {
    /// Test-only: makes `target` end as `how` says.
    #[cfg(test)]
    pub(crate) fn crash(&self, target: CoreActor, how: Crash) {
        let _ = self.orders.send((target, how));
    }
}

impl Orders {
    /// The next order; never, outside this crate's tests.
    pub(crate) async fn next(&mut self) -> Order {
        #[cfg(test)]
        match self.orders.recv().await {
            Some(order) => order,
            None => std::future::pending().await,
        }
        #[cfg(not(test))]
        std::future::pending().await
    }
}

/// Carries out an order.
pub(crate) fn obey(
    order: Order,
    supervisor: &Addr<HealthSupervisor>,
    aggregator: &Addr<Aggregator>,
) {
    #[cfg(test)]
    match order {
        (CoreActor::Supervisor, how) => supervisor.do_send(how),
        (CoreActor::Aggregator, how) => aggregator.do_send(how),
    }
    #[cfg(not(test))]
    {
        let _ = (supervisor, aggregator);
        match order {}
    }
}

#[cfg(test)]
mod on {
    use actix::prelude::*;

    use super::super::{Aggregator, HealthSupervisor};

    /// How a core actor is made to end, in tests.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
    #[rtype(result = "()")]
    pub(crate) enum Crash {
        /// `ctx.stop()`, as an actor that decides to end.
        Stop,
        /// A panic inside a handler.
        Panic,
    }

    impl Handler<Crash> for Aggregator {
        type Result = ();

        fn handle(&mut self, crash: Crash, ctx: &mut Context<Self>) {
            match crash {
                Crash::Stop => ctx.stop(),
                Crash::Panic => panic!("the aggregator panicked on purpose (a test)"),
            }
        }
    }

    impl Handler<Crash> for HealthSupervisor {
        type Result = ();

        fn handle(&mut self, crash: Crash, ctx: &mut Context<Self>) {
            match crash {
                Crash::Stop => ctx.stop(),
                Crash::Panic => panic!("the supervisor panicked on purpose (a test)"),
            }
        }
    }
}
