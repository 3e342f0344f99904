//! The order in which a frame's residual is predicted (RFC 3951 §3.6.1):
//! from the start state, the rest of its 80 samples; then the following
//! sub-frames forwards; then the preceding ones backwards in time, on
//! time-reversed signals. The encoder and the decoder walk it alike.

use super::codebook::{MEM_LEN, STATE_MEM_LEN};
use super::state::layout;
use super::{Mode, BLOCKL_MAX, SUBL};

/// One target to code.
pub struct Step {
    /// `None` for the samples completing the start state, else the
    /// sub-frame's position in the coding order (0 first).
    pub subcount: Option<usize>,
    /// Where the target's first sample is in the frame.
    pub origin: usize,
    /// Whether the target runs backwards in time from `origin`.
    pub reversed: bool,
    pub len: usize,
    /// The sub-frame whose weighting filter applies.
    pub sub: usize,
}

impl Step {
    /// The frame position of the target's `k`-th sample.
    pub fn at(&self, k: usize) -> usize {
        if self.reversed {
            self.origin - k
        } else {
            self.origin + k
        }
    }
}

/// Walks the frame: `code` gets each step with its codebook memory and
/// writes the decoded target; `decres` must hold the decoded start state.
pub fn walk(
    mode: Mode,
    start: usize,
    state_first: bool,
    decres: &mut [f32; BLOCKL_MAX],
    mut code: impl FnMut(&Step, &[f32], &mut [f32]),
) {
    let nsub = mode.nsub();
    let short = mode.state_short_len();
    let (pos, diff) = layout(mode, start, state_first);
    let mut mem = [0.0f32; MEM_LEN];
    let mut out = [0.0f32; SUBL];
    let mut run =
        |step: Step, mem: &[f32], decres: &mut [f32; BLOCKL_MAX], out: &mut [f32; SUBL]| {
            code(&step, mem, &mut out[..step.len]);
            for k in 0..step.len {
                decres[step.at(k)] = out[k];
            }
        };

    let extra = if state_first {
        mem[MEM_LEN - short..].copy_from_slice(&decres[pos..pos + short]);
        Step {
            subcount: None,
            origin: pos + short,
            reversed: false,
            len: diff,
            sub: start,
        }
    } else {
        for k in 0..short {
            mem[MEM_LEN - 1 - k] = decres[pos + k];
        }
        Step {
            subcount: None,
            origin: pos - 1,
            reversed: true,
            len: diff,
            sub: start - 1,
        }
    };
    run(extra, &mem[MEM_LEN - STATE_MEM_LEN..], decres, &mut out);

    let mut subcount = 0;
    let forward = nsub - start - 1;
    if forward > 0 {
        mem.fill(0.0);
        mem[MEM_LEN - 80..].copy_from_slice(&decres[(start - 1) * SUBL..(start + 1) * SUBL]);
        for sf in 0..forward {
            let sub = start + 1 + sf;
            let step = Step {
                subcount: Some(subcount),
                origin: sub * SUBL,
                reversed: false,
                len: SUBL,
                sub,
            };
            run(step, &mem, decres, &mut out);
            mem.copy_within(SUBL.., 0);
            mem[MEM_LEN - SUBL..].copy_from_slice(&out);
            subcount += 1;
        }
    }

    let backward = start - 1;
    if backward > 0 {
        let got = (SUBL * (nsub + 1 - start)).min(MEM_LEN);
        mem.fill(0.0);
        for k in 0..got {
            mem[MEM_LEN - 1 - k] = decres[(start - 1) * SUBL + k];
        }
        for sf in 0..backward {
            let step = Step {
                subcount: Some(subcount),
                origin: (start - 1 - sf) * SUBL - 1,
                reversed: true,
                len: SUBL,
                sub: start - 2 - sf,
            };
            run(step, &mem, decres, &mut out);
            mem.copy_within(SUBL.., 0);
            mem[MEM_LEN - SUBL..].copy_from_slice(&out);
            subcount += 1;
        }
    }
}
