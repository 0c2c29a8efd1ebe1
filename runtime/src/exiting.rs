//! Service threads that are still returning after their runtime was
//! dropped on the thread itself (a thread cannot join itself): a leaf
//! below the driver, which hands them over, and the service thread.

/// Service threads whose driver was dropped on the thread itself (its
/// last handle was the thread's own, for one turn): they return at once,
/// and [`join_exiting`] waits for them. Bounded by the runtimes a process
/// opens at once.
static EXITING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Hands over the thread that is about to return (see `Driver`'s `Drop`).
pub(crate) fn push(h: std::thread::JoinHandle<()>) {
    let mut v = EXITING.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|h| !h.is_finished());
    v.push(h);
}

/// Joins the service threads of dropped runtimes that are still
/// returning; a library about to be unloaded calls it (the libfabric
/// provider's `cleanup`), so that none of its threads runs its code
/// afterwards. Runtimes still open keep their threads.
pub fn join_exiting() {
    let v = std::mem::take(&mut *EXITING.lock().unwrap_or_else(|p| p.into_inner()));
    for h in v {
        let _ = h.join();
    }
}
