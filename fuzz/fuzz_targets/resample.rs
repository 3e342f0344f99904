//! Any bytes as 16-bit samples through the resampler at every conversion strowger makes, in
//! blocks of any length (the first byte picks the conversion, each block's length comes from the
//! data): no panic, and every block gives exactly its share of output, as the translator's
//! fixed packet sizes need.
#![no_main]

use codec::Resampler;
use libfuzzer_sys::fuzz_target;

use codec::resample::RATES;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (from, to) = RATES[usize::from(pick) % RATES.len()];
    let mut r = Resampler::new(from, to);
    let samples: Vec<i16> = rest
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let (mut fed, mut given) = (0usize, 0usize);
    let mut out = vec![0i16; 6 * samples.len() + 16];
    let mut left = &samples[..];
    while !left.is_empty() {
        let n = (usize::from(left[0] as u16) % 1000 + 1).min(left.len());
        let (block, tail) = left.split_at(n);
        fed += n;
        given += r.process(block, &mut out[..r.output_len(n)]);
        // The output so far is the whole input's share, rounded up (an output needs only the sample it falls on).
        assert_eq!(given, (fed * to as usize).div_ceil(from as usize), "{from}->{to}");
        left = tail;
    }
});
