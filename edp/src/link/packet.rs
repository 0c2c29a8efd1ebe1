//! AF_PACKET link (work in progress).
