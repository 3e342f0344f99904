//! Correlations of every window of a sequence with one target: the enhancer's
//! pitch search and segment alignment, the start state's all-pass filter and
//! the codebook's filter. Vectorised across windows, 8 at a time: each window's
//! sum is still accumulated term by term in the scalar order (a multiplication,
//! then an addition; never fused), so the results are bit-identical to the
//! scalar loops of RFC 3951's reference code on every machine. 8 lanes are one
//! AVX2 register where the CPU has it (checked once, cached by std), else two
//! SSE2 ones (x86-64's baseline), else whatever the target has; up to 4 such
//! registers are summed at once, since each one's additions wait on each other.

/// `out[i] = Σ_j seq[i + j]·target[j]`, summed in `j` order;
/// `seq.len() >= out.len() + target.len() - 1`.
pub fn corr(out: &mut [f32], seq: &[f32], target: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, the only feature the function enables.
        return unsafe { corr_avx2(out, seq, target) };
    }
    windows::<false>(out, &mut [], seq, target)
}

/// [`corr`], and each window's energy `energy[i] = Σ_j seq[i + j]²` in `j` order.
pub fn corr_energy(cross: &mut [f32], energy: &mut [f32], seq: &[f32], target: &[f32]) {
    assert_eq!(cross.len(), energy.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: as in `corr`.
        return unsafe { corr_energy_avx2(cross, energy, seq, target) };
    }
    windows::<true>(cross, energy, seq, target)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn corr_avx2(out: &mut [f32], seq: &[f32], target: &[f32]) {
    windows::<false>(out, &mut [], seq, target)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn corr_energy_avx2(cross: &mut [f32], energy: &mut [f32], seq: &[f32], target: &[f32]) {
    windows::<true>(cross, energy, seq, target)
}

#[inline(always)]
fn windows<const ENERGY: bool>(cross: &mut [f32], energy: &mut [f32], seq: &[f32], target: &[f32]) {
    let n = cross.len();
    assert!(seq.len() + 1 >= n + target.len());
    // Groups of up to 32 windows (16 with energies) so that several registers'
    // chains of additions are under way at once; a last group is shifted back to end
    // at `n` (its overlap is computed twice, alike); fewer than 4 are summed one by one.
    let done = if n >= 32 && !ENERGY {
        groups::<32, ENERGY>(cross, energy, seq, target)
    } else if n >= 16 {
        groups::<16, ENERGY>(cross, energy, seq, target)
    } else if n >= 8 {
        groups::<8, ENERGY>(cross, energy, seq, target)
    } else if n >= 4 {
        groups::<4, ENERGY>(cross, energy, seq, target)
    } else {
        0
    };
    for i in done..n {
        let (mut xy, mut yy) = (-0.0f32, -0.0f32);
        for (&y, &t) in seq[i..i + target.len()].iter().zip(target) {
            xy += y * t;
            if ENERGY {
                yy += y * y;
            }
        }
        cross[i] = xy;
        if ENERGY {
            energy[i] = yy;
        }
    }
}

/// All `cross.len() >= L` windows in groups of `L`; returns how many were done.
#[inline(always)]
fn groups<const L: usize, const ENERGY: bool>(
    cross: &mut [f32],
    energy: &mut [f32],
    seq: &[f32],
    target: &[f32],
) -> usize {
    let (n, m) = (cross.len(), target.len());
    let mut i = 0;
    while i < n {
        let g = i.min(n - L);
        let (mut xy, mut yy) = ([-0.0f32; L], [-0.0f32; L]);
        for (w, &t) in seq[g..g + m + L - 1].windows(L).zip(target) {
            let y: &[f32; L] = w.try_into().unwrap();
            for k in 0..L {
                xy[k] += y[k] * t;
                if ENERGY {
                    yy[k] += y[k] * y[k];
                }
            }
        }
        cross[g..g + L].copy_from_slice(&xy);
        if ENERGY {
            energy[g..g + L].copy_from_slice(&yy);
        }
        i = g + L;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1103515245).wrapping_add(12345);
                ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 1000.0
            })
            .collect()
    }

    /// Every window count (fewer than, exactly and more than 8 lanes) gives
    /// bit for bit what the scalar sums in order give, by the dispatched
    /// functions (AVX2 here when the CPU has it) and by the baseline build.
    #[test]
    fn matches_the_scalar_sums_bit_for_bit() {
        let target = signal(40, 1);
        for n in [1, 5, 7, 8, 9, 16, 21, 32, 50, 80, 116] {
            let seq = signal(n + 39, n as u32 + 2);
            let (mut c, mut e, mut c2) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            let (mut c3, mut e3) = (vec![0.0; n], vec![0.0; n]);
            corr_energy(&mut c, &mut e, &seq, &target);
            corr(&mut c2, &seq, &target);
            windows::<true>(&mut c3, &mut e3, &seq, &target);
            assert_eq!((&c3, &e3), (&c, &e), "baseline build, {n} windows");
            for i in 0..n {
                let w = &seq[i..i + 40];
                let xy = w.iter().zip(&target).fold(0.0f32, |a, (y, t)| a + y * t);
                let yy = w.iter().fold(0.0f32, |a, y| a + y * y);
                assert_eq!(c[i].to_bits(), xy.to_bits(), "cross {i} of {n}");
                assert_eq!(c2[i].to_bits(), xy.to_bits(), "corr {i} of {n}");
                assert_eq!(e[i].to_bits(), yy.to_bits(), "energy {i} of {n}");
            }
        }
    }
}
