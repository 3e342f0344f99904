//! The process's file descriptor table, grown once at start-up to what the RTP range may open.
//!
//! Linux doubles a process's descriptor table when a new descriptor does not fit, and while
//! several threads share the table it first waits for an RCU grace period (`expand_fdtable`
//! calls `synchronize_rcu`). A worker opening the RTP and RTCP sockets of a new call slept there
//! for 6–16 ms each time the table doubled (at about 128, 256, 512, 1,024 … calls, two
//! descriptors each), and every call of that worker got its next frames that much late. Opening
//! one descriptor at the top of the expected range before any thread starts grows the table while
//! the process has a single thread, which needs no grace period; the table never shrinks.

use std::io;

/// Descriptors beyond the RTP sockets: SIP sockets, TCP connections, pollers and wakers, store
/// connections, the CDR and log files.
pub const OTHER: usize = 1024;

/// How many descriptors to make room for: two per RTP port pair (RTP and RTCP) and [`OTHER`],
/// but no more than the soft RLIMIT_NOFILE `limit` lets the process open.
pub fn wanted(rtp_pairs: usize, limit: u64) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    rtp_pairs.saturating_mul(2).saturating_add(OTHER).min(limit)
}

/// Descriptors kept free for everything but RTP and TCP connections when capping TCP.
pub const HEADROOM: usize = 256;

/// The most TCP connections to hold at once: `tcp_max` (`security.tcp_max`), lowered so that
/// the RTP sockets `rtp_fds` and [`HEADROOM`] still fit under the soft RLIMIT_NOFILE `limit`: a
/// flood of connections must never leave a call without its RTP sockets. At least 16.
pub fn tcp_cap(tcp_max: usize, rtp_fds: usize, limit: u64) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let room = limit.saturating_sub(rtp_fds.saturating_add(HEADROOM));
    tcp_max.min(room.max(16))
}

/// RTP descriptors a process may hold: two per port pair it may bind, which is no more than
/// the range's pairs nor than two legs per call (`max_calls`) and each worker's spare pairs.
pub fn rtp_fds(rtp_pairs: usize, max_calls: usize, workers: usize, spare: usize) -> usize {
    2 * rtp_pairs.min(2 * max_calls + workers * spare)
}

/// The soft RLIMIT_NOFILE.
pub fn limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } {
        0 => rl.rlim_cur,
        _ => 0,
    }
}

/// Grows the descriptor table to hold `n` descriptors (numbers below `n`): a descriptor is
/// duplicated to number `n - 1` and both are closed again. Call it before starting threads.
pub fn reserve(n: usize) -> io::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let top = libc::c_int::try_from(n - 1).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: plain system calls on descriptors this function opens and closes itself.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if high < 0 {
            return Err(err);
        }
        libc::close(high);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_for_two_sockets_per_rtp_pair_and_the_rest_within_the_limit() {
        assert_eq!(wanted(10_000, 1_000_000), 20_000 + OTHER);
        assert_eq!(wanted(10_000, 20_000), 20_000);
        assert_eq!(wanted(0, 20_000), OTHER);
        assert_eq!(wanted(usize::MAX, u64::MAX), usize::MAX);
    }

    #[test]
    fn tcp_connections_leave_room_for_the_rtp_sockets() {
        // The default range (5,000 pairs) under a limit of 20,000: 4,096 fit beside 10,000.
        let rtp = rtp_fds(5_000, 1_000, 2, 64);
        assert_eq!(rtp, 2 * 2_128);
        assert_eq!(tcp_cap(4_096, 10_000, 20_000), 4_096);
        // Under the common 1,024 a few hundred, and never none.
        assert_eq!(tcp_cap(4_096, 500, 1_024), 268);
        assert_eq!(tcp_cap(4_096, 10_000, 1_024), 16);
        assert_eq!(tcp_cap(8, 0, 1_000_000), 8);
    }

    /// The table's size is FDSize in /proc/self/status.
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    #[test]
    fn reserve_grows_the_table_up_to_the_limit() {
        let n = wanted(2_000, limit());
        reserve(n).unwrap();
        assert!(table_size() >= n, "FDSize {} < {n}", table_size());
        let past = usize::try_from(limit()).map_or(usize::MAX, |l| l.saturating_add(1));
        assert!(reserve(past).is_err(), "a descriptor past RLIMIT_NOFILE");
    }
}
