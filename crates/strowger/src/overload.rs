//! Whether a worker is past capacity, judged from its own work: its media ticks run late for a
//! sustained spell *and* its thread is busy most of the wall time. Late ticks alone do not
//! say whose fault they are: on a shared host another program (a compiler on every core) delays
//! the worker's wake-ups while strowger itself has little to do, and refusing calls then helps
//! no one. A worker that is truly behind spends its time running, so its CPU time per wall time
//! is high; one the host starves waits instead. Entering takes [`SUSTAINED`] windows late and
//! busy in a row; leaving takes [`QUIET`] without one (hysteresis, so a worker at the edge does
//! not flap between accepting and refusing).
//!
//! Sans-IO: the worker feeds each tick's lateness and, once a window, its thread's CPU time.

use std::time::{Duration, Instant};

/// The span over which lateness is averaged and CPU use measured.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Average tick lateness over a window past which the window counts as late (epoll's
/// millisecond timeouts alone make ticks up to ~1 ms late), and below which it counts as quiet.
const ENTER_LATE: Duration = Duration::from_millis(8);
const LEAVE_LATE: Duration = Duration::from_millis(4);
/// The thread's CPU time over the window's wall time past which the lateness is its own work.
/// A worker behind on its own work runs all the time it is given; with another busy program on
/// its core the scheduler still gives it half.
const BUSY: f64 = 0.5;
/// Late-and-busy windows in a row that make an overload (300 ms: a real flood is refused well
/// within a second, a burst of a few late ticks is not).
const SUSTAINED: u32 = 3;
/// How long without a late-and-busy window ends an overload: as long as entering takes, so the
/// calls a short burst turns away are few, and a worker that caught up accepts again at once.
pub const QUIET: Duration = Duration::from_millis(300);

/// A change of verdict, with the window that decided it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// Past capacity: ticks `late` on average while the thread was `busy` (0..1) of the time.
    Enter {
        late: Duration,
        busy: f64,
    },
    Leave,
}

pub struct LoadWatch {
    start: Instant,
    /// The thread's CPU time at `start`.
    cpu: Duration,
    late_sum: Duration,
    ticks: u32,
    /// Late-and-busy windows in a row.
    strained: u32,
    /// When the last late-and-busy window ended.
    last_strained: Instant,
    /// The last window's thread CPU time was at least [`BUSY`] of its wall time.
    busy: bool,
    overloaded: bool,
}

impl LoadWatch {
    pub fn new(now: Instant, cpu: Duration) -> LoadWatch {
        LoadWatch {
            start: now,
            cpu,
            late_sum: Duration::ZERO,
            ticks: 0,
            strained: 0,
            last_strained: now,
            busy: false,
            overloaded: false,
        }
    }

    /// Whether the worker's own work filled the last window (its thread ran at least half of
    /// it): what makes a wait in the SIP socket a backlog of its own rather than the host's.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// A media tick ran `late`; `cpu` reads the thread's CPU time (called once per window).
    pub fn tick(
        &mut self,
        now: Instant,
        late: Duration,
        cpu: impl FnOnce() -> Duration,
    ) -> Option<Change> {
        self.late_sum += late;
        self.ticks += 1;
        let wall = now.saturating_duration_since(self.start);
        if wall < WINDOW {
            return None;
        }
        let cpu = cpu();
        let busy = cpu.saturating_sub(self.cpu).as_secs_f64() / wall.as_secs_f64();
        self.busy = busy >= BUSY;
        let late = self.late_sum / self.ticks;
        (self.start, self.cpu, self.late_sum, self.ticks) = (now, cpu, Duration::ZERO, 0);
        let bar = if self.overloaded {
            LEAVE_LATE
        } else {
            ENTER_LATE
        };
        if late > bar && busy >= BUSY {
            self.strained += 1;
            self.last_strained = now;
        } else {
            self.strained = 0;
        }
        if !self.overloaded && self.strained >= SUSTAINED {
            self.overloaded = true;
            return Some(Change::Enter { late, busy });
        }
        if self.overloaded && now.saturating_duration_since(self.last_strained) >= QUIET {
            self.overloaded = false;
            return Some(Change::Leave);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(5);

    /// Runs `ticks` ticks from `*now`, each `late` and the thread using `busy` of the wall
    /// time; the changes, with the time each came.
    fn run(
        w: &mut LoadWatch,
        now: &mut Instant,
        cpu: &mut Duration,
        ticks: u32,
        late: Duration,
        busy: f64,
    ) -> Vec<(Duration, Change)> {
        let t0 = *now;
        let mut got = Vec::new();
        for _ in 0..ticks {
            // A late tick ends `late` after its grid point: the wall time a tick covers grows.
            let step = TICK.max(late);
            *now += step;
            *cpu += step.mul_f64(busy);
            let c = *cpu;
            if let Some(change) = w.tick(*now, late, || c) {
                got.push((*now - t0, change));
            }
        }
        got
    }

    fn start() -> (LoadWatch, Instant, Duration) {
        let now = Instant::now();
        (LoadWatch::new(now, Duration::ZERO), now, Duration::ZERO)
    }

    #[test]
    fn a_single_late_tick_is_no_overload() {
        let (mut w, mut now, mut cpu) = start();
        let ms = Duration::from_millis;
        assert!(run(&mut w, &mut now, &mut cpu, 100, ms(0), 0.9).is_empty());
        assert!(run(&mut w, &mut now, &mut cpu, 1, ms(11), 0.9).is_empty());
        assert!(run(&mut w, &mut now, &mut cpu, 400, ms(0), 0.9).is_empty());
    }

    #[test]
    fn sustained_lateness_from_its_own_work_is_overload_within_a_second() {
        let (mut w, mut now, mut cpu) = start();
        let got = run(
            &mut w,
            &mut now,
            &mut cpu,
            200,
            Duration::from_millis(12),
            0.97,
        );
        let (after, change) = got[0];
        assert!(matches!(change, Change::Enter { busy, .. } if busy > 0.9));
        assert!(after <= Duration::from_secs(1), "entered after {after:?}");
        assert_eq!(got.len(), 1, "entered once: {got:?}");
    }

    #[test]
    fn lateness_the_host_caused_while_the_worker_idles_is_no_overload() {
        // Another program holds the cores: ticks 10–20 ms late, the worker busy 5 % of the time.
        let (mut w, mut now, mut cpu) = start();
        let got = run(
            &mut w,
            &mut now,
            &mut cpu,
            1000,
            Duration::from_millis(15),
            0.05,
        );
        assert!(got.is_empty(), "{got:?}");
        assert!(!w.busy(), "a wait in the SIP socket is the host's too");
        run(&mut w, &mut now, &mut cpu, 40, Duration::ZERO, 0.9);
        assert!(w.busy(), "a worker running 90 % of the time is busy");
    }

    #[test]
    fn overload_ends_after_a_quiet_spell_not_at_the_first_good_window() {
        let (mut w, mut now, mut cpu) = start();
        let ms = Duration::from_millis;
        assert_eq!(run(&mut w, &mut now, &mut cpu, 100, ms(12), 0.97).len(), 1);
        // 200 ms quiet, then strained again: still in the same episode.
        assert!(run(&mut w, &mut now, &mut cpu, 40, ms(1), 0.3).is_empty());
        assert!(run(&mut w, &mut now, &mut cpu, 20, ms(12), 0.97).is_empty());
        // Lateness between the bars keeps it in while the worker stays busy.
        assert!(run(&mut w, &mut now, &mut cpu, 300, ms(6), 0.97).is_empty());
        let got = run(&mut w, &mut now, &mut cpu, 400, ms(1), 0.3);
        assert_eq!(got.len(), 1, "{got:?}");
        let (after, change) = got[0];
        assert_eq!(change, Change::Leave);
        assert!(after >= QUIET && after <= QUIET + 2 * WINDOW, "{after:?}");
    }
}
