//! The iLBC encoder (RFC 3951 §3).

use super::bits::{pack, Params};
use super::codebook::{construct, to_wire, Codebook, SearchSpace};
use super::filter::{all_pole, analysis, Biquad};
use super::lpc::{self, Lpc, CHIRP_WEIGHT, LOOKBACK};
use super::tables::{HP_IN_POLES, HP_IN_ZEROS, LSF_MEAN};
use super::walk::walk;
use super::{state, Mode, BLOCKL_MAX, ORDER, SUBL};

/// One stream's encoder state.
pub struct IlbcEncoder {
    mode: Mode,
    hp: Biquad,
    ana_mem: [f32; ORDER],
    lsf_old: [f32; ORDER],
    lsfdeq_old: [f32; ORDER],
    lpc_buffer: [f32; LOOKBACK + BLOCKL_MAX],
    space: SearchSpace,
}

impl IlbcEncoder {
    pub fn new(mode: Mode) -> IlbcEncoder {
        IlbcEncoder {
            mode,
            hp: Biquad::default(),
            ana_mem: [0.0; ORDER],
            lsf_old: LSF_MEAN,
            lsfdeq_old: LSF_MEAN,
            lpc_buffer: [0.0; LOOKBACK + BLOCKL_MAX],
            space: SearchSpace::new(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Encodes one frame: `pcm` is `mode.samples()` long, `out` `mode.bytes()`.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) {
        let mode = self.mode;
        let blockl = mode.samples();
        let mut data = [0.0f32; BLOCKL_MAX];
        for (d, s) in data.iter_mut().zip(&pcm[..blockl]) {
            *d = f32::from(*s);
        }
        self.hp.run(&HP_IN_ZEROS, &HP_IN_POLES, &mut data[..blockl]);

        let mut p = Params::default();
        let (synt, weight) = self.lpc(&data[..blockl], &mut p);

        let mut residual = [0.0f32; BLOCKL_MAX];
        for (n, a) in synt.iter().enumerate().take(mode.nsub()) {
            let r = n * SUBL..(n + 1) * SUBL;
            analysis(&data[r.clone()], a, &mut residual[r], &mut self.ana_mem);
        }

        // The start state: in the more energetic end of the chosen 80 samples.
        let start = state::classify(&residual, mode);
        let short = mode.state_short_len();
        let first = (start - 1) * SUBL;
        let energy = |from: usize| {
            residual[from..from + short]
                .iter()
                .map(|x| x * x)
                .sum::<f32>()
        };
        let state_first = energy(first) > energy(first + 80 - short);
        let (pos, _) = state::layout(mode, start, state_first);
        let mut decres = [0.0f32; BLOCKL_MAX];
        p.idx_for_max = state::search(
            &residual[pos..pos + short],
            &synt[start - 1..=start],
            &weight[start - 1..=start],
            state_first,
            &mut p.state[..short],
        );
        state::construct(
            p.idx_for_max,
            &p.state[..short],
            &synt[start - 1],
            &mut decres[pos..pos + short],
        );
        p.start = start as u32;
        p.state_first = u32::from(state_first);

        let space = &mut self.space;
        walk(mode, start, state_first, &mut decres, |step, mem, out| {
            // Weight memory and target together, as one signal.
            let len = step.len;
            let mut buf = [0.0f32; ORDER + 147 + SUBL];
            buf[ORDER..ORDER + mem.len()].copy_from_slice(mem);
            for k in 0..len {
                buf[ORDER + mem.len() + k] = residual[step.at(k)];
            }
            let end = ORDER + mem.len() + len;
            all_pole(&mut buf, ORDER, end, &weight[step.sub]);
            let weighted = Codebook::new(&buf[ORDER..ORDER + mem.len()], len);
            let (index, gain) = match step.subcount {
                None => (&mut p.extra_cb[..], &mut p.extra_gain[..]),
                Some(i) => (&mut p.cb[3 * i..3 * i + 3], &mut p.gain[3 * i..3 * i + 3]),
            };
            space.search(
                &weighted,
                &buf[end - len..end],
                step.subcount == Some(0),
                index,
                gain,
            );
            construct(&Codebook::new(mem, len), index, gain, out);
        });

        p.cb[1] = to_wire(p.cb[1]);
        p.cb[2] = to_wire(p.cb[2]);
        pack(mode, &p, &mut out[..mode.bytes()]);
    }

    /// LPC analysis and quantisation: the synthesis filters (from quantised
    /// LSFs) and weighting filters (from unquantised ones) of every sub-frame.
    fn lpc(&mut self, data: &[f32], p: &mut Params) -> ([Lpc; 6], [Lpc; 6]) {
        let mode = self.mode;
        let keep = LOOKBACK + BLOCKL_MAX - data.len();
        self.lpc_buffer[keep..].copy_from_slice(data);
        let mut lsf = [[0.0f32; ORDER]; 2];
        lpc::analyse(&self.lpc_buffer, mode, &mut lsf);
        self.lpc_buffer.copy_within(data.len().., 0);

        let mut lsfdeq = [[0.0f32; ORDER]; 2];
        for k in 0..mode.lpc_n() {
            let (idx, q) = lpc::quantise(&lsf[k]);
            for (d, i) in p.lsf[3 * k..3 * k + 3].iter_mut().zip(idx) {
                *d = i as u32;
            }
            lsfdeq[k] = q;
            lpc::stabilise(&mut lsfdeq[k]);
        }
        let mut synt = [[0.0f32; ORDER + 1]; 6];
        let mut weight = [[0.0f32; ORDER + 1]; 6];
        lpc::interpolated_filters(mode, &mut self.lsfdeq_old, &lsfdeq, &mut synt);
        lpc::interpolated_filters(mode, &mut self.lsf_old, &lsf, &mut weight);
        for w in weight.iter_mut() {
            *w = lpc::bw_expand(w, CHIRP_WEIGHT);
        }
        (synt, weight)
    }
}
