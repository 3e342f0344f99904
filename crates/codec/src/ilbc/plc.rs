//! Packet-loss concealment (RFC 3951 §4.5): a lost frame's residual is the
//! last one's pitch cycle repeated, mixed with noise cut from it in
//! proportion to how periodic it was, and faded out over consecutive losses;
//! the last LPC filter is kept.

use super::lpc::Lpc;
use super::{BLOCKL_MAX, ORDER};

pub struct Plc {
    prev_lag: usize,
    lost_in_row: usize,
    prev_lost: bool,
    prev_lpc: Lpc,
    prev_residual: [f32; BLOCKL_MAX],
    periodicity: f32,
    seed: u32,
}

impl Plc {
    pub fn new() -> Plc {
        let mut prev_lpc = [0.0; ORDER + 1];
        prev_lpc[0] = 1.0;
        Plc {
            prev_lag: 120,
            lost_in_row: 0,
            prev_lost: false,
            prev_lpc,
            prev_residual: [0.0; BLOCKL_MAX],
            periodicity: 0.0,
            seed: 777,
        }
    }

    /// Remembers a correctly received frame's residual and last LPC filter.
    pub fn received(&mut self, residual: &[f32], lpc: &Lpc) {
        self.lost_in_row = 0;
        self.prev_lost = false;
        self.prev_lpc = *lpc;
        self.prev_residual[..residual.len()].copy_from_slice(residual);
    }

    /// Conceals a lost frame of `out.len()` samples; `lag` is the pitch the
    /// enhancer last found. Returns the filter to synthesise it with.
    pub fn conceal(&mut self, lag: usize, out: &mut [f32]) -> Lpc {
        let blockl = out.len();
        self.lost_in_row += 1;
        let (lag, per) = if self.prev_lost {
            (self.prev_lag, self.periodicity)
        } else {
            // Refine the lag around the enhancer's estimate.
            let lag = lag.clamp(23, blockl - 3);
            let mut best = (self.correlation(lag - 3, blockl), lag - 3);
            for l in lag - 2..=lag + 3 {
                let c = self.correlation(l, blockl);
                if c.0 > best.0 .0 {
                    best = (c, l);
                }
            }
            (best.1, best.0 .1)
        };

        let use_gain = if self.lost_in_row * blockl > 320 {
            0.9
        } else {
            1.0
        };
        let root = per.max(0.0).sqrt();
        let pitch = if root > 0.7 {
            1.0
        } else if root > 0.4 {
            (root - 0.4) / (0.7 - 0.4)
        } else {
            0.0
        };
        // Repeat at least 80 samples so one pitch cycle is not heard twice in a row.
        let use_lag = if lag < 80 { 2 * lag } else { lag }.min(blockl);

        let mut noise = [0.0f32; BLOCKL_MAX];
        let mut energy = 0.0f32;
        for i in 0..blockl {
            self.seed = self.seed.wrapping_mul(69069).wrapping_add(1) & 0x7fff_ffff;
            let randlag = 50 + (self.seed % 70) as usize;
            noise[i] = if i < randlag {
                self.prev_residual[blockl + i - randlag]
            } else {
                noise[i - randlag]
            };
            let periodic = if i < use_lag {
                self.prev_residual[blockl + i - use_lag]
            } else {
                out[i - use_lag]
            };
            let fade = match i {
                0..80 => 1.0,
                80..160 => 0.95,
                _ => 0.9,
            };
            out[i] = fade * use_gain * (pitch * periodic + (1.0 - pitch) * noise[i]);
            energy += out[i] * out[i];
        }
        // Too quiet to carry a pitch: noise alone.
        if (energy / blockl as f32).sqrt() < 30.0 {
            out.copy_from_slice(&noise[..blockl]);
        }

        self.prev_lag = lag;
        self.periodicity = per;
        self.prev_lost = true;
        self.prev_residual[..blockl].copy_from_slice(out);
        self.prev_lpc
    }

    /// Correlation measure, and periodicity, of the last 60 samples of the
    /// previous residual with those `lag` earlier.
    fn correlation(&self, lag: usize, blockl: usize) -> (f32, f32) {
        let buf = &self.prev_residual[..blockl];
        let range = 60.min(blockl - lag);
        let (mut xy, mut yy, mut xx) = (0.0f32, 0.0f32, 0.0f32);
        for i in blockl - range..blockl {
            let (x, y) = (buf[i], buf[i - lag]);
            xy += x * y;
            yy += y * y;
            xx += x * x;
        }
        if yy > 0.0 {
            (
                xy * xy / yy,
                xy.abs() / (yy.sqrt() * xx.sqrt()).max(f32::MIN_POSITIVE),
            )
        } else {
            (0.0, 0.0)
        }
    }
}
