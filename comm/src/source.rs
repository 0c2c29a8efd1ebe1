//! [`Communicator`] as a `mio::event::Source` (requests
//! usable from an event loop): registering a communicator registers its
//! CTP socket's runtime slot (`runtime::slot_source!`), which is readable while
//! CTP holds deliveries for it (messages, confirmations' errors). An event
//! loop then calls [`Communicator::progress`] and `test`s its requests,
//! as MPI programs poll with `MPI_Test` (MPI 4.0 section 3.7.3); a request
//! can complete without an event when its send went to CTP or its message
//! was already queued, so test them after each `isend`/`irecv` too.

use ctp::{CtpSocket, Transport};
use runtime::mio::event::Source;
use runtime::mio::{Interest, Registry, Token};

use crate::Communicator;

impl<T: Transport> Source for Communicator<T>
where
    CtpSocket<T>: Source,
{
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> std::io::Result<()> {
        self.socket().clone().register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> std::io::Result<()> {
        self.socket().clone().reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> std::io::Result<()> {
        self.socket().clone().deregister(registry)
    }
}
