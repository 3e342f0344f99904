//! The iLBC decoder (RFC 3951 §4), always with the enhancer.

use super::bits::{unpack, Params};
use super::codebook::{construct, from_wire, Codebook, STATE_MEM_LEN};
use super::enhancer::Enhancer;
use super::filter::{synthesis, Biquad};
use super::lpc::{self, Lpc};
use super::plc::Plc;
use super::tables::{HP_OUT_POLES, HP_OUT_ZEROS, LSF_MEAN};
use super::walk::walk;
use super::{state, Mode, BLOCKL_MAX, ORDER, SUBL};

/// One stream's decoder state.
pub struct IlbcDecoder {
    mode: Mode,
    synt_mem: [f32; ORDER],
    lsfdeq_old: [f32; ORDER],
    /// The previous frame's filters: the enhancer's delay reaches into it.
    old_synt: [Lpc; 6],
    last_lag: usize,
    plc: Plc,
    hp: Biquad,
    enhancer: Enhancer,
    prev_concealed: bool,
}

impl IlbcDecoder {
    pub fn new(mode: Mode) -> IlbcDecoder {
        let mut unit = [0.0; ORDER + 1];
        unit[0] = 1.0;
        IlbcDecoder {
            mode,
            synt_mem: [0.0; ORDER],
            lsfdeq_old: LSF_MEAN,
            old_synt: [unit; 6],
            last_lag: 20,
            plc: Plc::new(),
            hp: Biquad::default(),
            enhancer: Enhancer::new(),
            prev_concealed: false,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Decodes one frame (`mode.bytes()` long) into `mode.samples()` of `out`;
    /// `None`, or a frame that fails the RFC's sanity checks (bad start
    /// position, out-of-range index, "empty frame" bit), is concealed.
    pub fn decode(&mut self, frame: Option<&[u8]>, out: &mut [i16]) {
        let mode = self.mode;
        let blockl = mode.samples();
        let mut decres = [0.0f32; BLOCKL_MAX];
        let mut synt = [[0.0f32; ORDER + 1]; 6];
        let good = frame
            .filter(|f| f.len() == mode.bytes())
            .map(|f| unpack(mode, f))
            .filter(|(p, not_empty)| *not_empty && valid(mode, p));
        let concealed = match good {
            Some((mut p, _)) => {
                self.residual(&mut p, &mut synt, &mut decres);
                self.plc.received(&decres[..blockl], &synt[mode.nsub() - 1]);
                false
            }
            None => {
                let lpc = self.plc.conceal(self.last_lag, &mut decres[..blockl]);
                synt = [lpc; 6];
                true
            }
        };

        let mut data = [0.0f32; BLOCKL_MAX];
        self.last_lag = self.enhancer.run(
            mode,
            &decres[..blockl],
            &mut data[..blockl],
            self.prev_concealed,
        );
        // The enhancer delays by one (20 ms) or two (30 ms) sub-frames, which
        // still belong to the previous frame's filters.
        let delay = match mode {
            Mode::Ms20 => 1,
            Mode::Ms30 => 2,
        };
        let nsub = mode.nsub();
        for i in 0..nsub {
            let a = if i < delay {
                self.old_synt[nsub - delay + i]
            } else {
                synt[i - delay]
            };
            synthesis(&mut data[i * SUBL..(i + 1) * SUBL], &a, &mut self.synt_mem);
        }
        self.hp
            .run(&HP_OUT_ZEROS, &HP_OUT_POLES, &mut data[..blockl]);
        for (o, d) in out.iter_mut().zip(&data[..blockl]) {
            *o = round(*d);
        }
        self.old_synt = synt;
        self.prev_concealed = concealed;
    }

    fn residual(&mut self, p: &mut Params, synt: &mut [Lpc; 6], decres: &mut [f32; BLOCKL_MAX]) {
        let mode = self.mode;
        p.cb[1] = from_wire(p.cb[1]);
        p.cb[2] = from_wire(p.cb[2]);
        let mut lsfdeq = [[0.0f32; ORDER]; 2];
        for (k, l) in lsfdeq.iter_mut().enumerate().take(mode.lpc_n()) {
            *l = lpc::dequantise(&p.lsf[3 * k..3 * k + 3]);
            lpc::stabilise(l);
        }
        lpc::interpolated_filters(mode, &mut self.lsfdeq_old, &lsfdeq, synt);

        let start = p.start as usize;
        let state_first = p.state_first == 1;
        let short = mode.state_short_len();
        let (pos, _) = state::layout(mode, start, state_first);
        state::construct(
            p.idx_for_max,
            &p.state[..short],
            &synt[start - 1],
            &mut decres[pos..pos + short],
        );
        walk(mode, start, state_first, decres, |step, mem, out| {
            let (index, gain) = match step.subcount {
                None => (&p.extra_cb[..], &p.extra_gain[..]),
                Some(i) => (&p.cb[3 * i..3 * i + 3], &p.gain[3 * i..3 * i + 3]),
            };
            construct(&Codebook::new(mem, step.len), index, gain, out);
        });
    }
}

/// The checks RFC 3951 makes on a received frame, plus the one its
/// reference code leaves out: the codebook indices of the 22/23 samples
/// next to the start state must lie within their smaller codebook.
fn valid(mode: Mode, p: &Params) -> bool {
    let start_ok = (1..mode.nsub() as u32).contains(&p.start);
    let extra_size = 2 * (STATE_MEM_LEN - (80 - mode.state_short_len()) + 1) as u32;
    start_ok && p.extra_cb.iter().all(|&i| i < extra_size)
}

/// `x.round().clamp(-32768.0, 32767.0) as i16` (halves away from zero), without the
/// library call `round` is on x86-64's baseline: `x - trunc(x)` is exact.
fn round(x: f32) -> i16 {
    let x = x.clamp(-32769.0, 32768.0);
    let t = x as i32;
    let frac = x - t as f32;
    let r = t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5);
    r.clamp(-32768, 32767) as i16
}

#[cfg(test)]
mod tests {
    /// Halves, their neighbours, the clamping edges and the non-finite values round as
    /// `f32::round` and the clamp do.
    #[test]
    fn round_is_the_library_round_clamped() {
        let mut xs = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e9,
            -1e9,
        ];
        for base in [
            -40000.0f32,
            -32768.5,
            -32767.5,
            -2.5,
            -0.5,
            0.5,
            1.5,
            32766.5,
            32767.5,
        ] {
            let mut x = base;
            for _ in 0..4 {
                xs.extend([x, x.next_up(), x.next_down()]);
                x += 1.0;
            }
        }
        let mut seed = 3u32;
        for _ in 0..100_000 {
            seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
            xs.push(f32::from_bits(seed) % 70000.0);
        }
        for x in xs {
            assert_eq!(
                super::round(x),
                x.round().clamp(-32768.0, 32767.0) as i16,
                "{x}"
            );
        }
    }
}
